package gym_test

import (
	"encoding/json"
	"regexp"
	"testing"
	"time"

	"github.com/gymserver/gymserver/gym"
)

// iso39 is the grammar of Python 3.9's datetime.fromisoformat for a date
// and time with an offset (see testdata/seed_user.py at the module root).
var iso39 = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}.\d{2}(:\d{2}(:\d{2}(\.(\d{3}|\d{6}))?)?)?([+-]\d{2}:\d{2}(:\d{2}(\.\d{6})?)?)?$`)

func TestTimeJSON(t *testing.T) {
	east := time.FixedZone("east", 5*3600+30*60)
	for _, tt := range []struct {
		name string
		in   time.Time
		want string
	}{
		{"nanoseconds are cut to microseconds", time.Date(2026, 11, 23, 10, 0, 0, 123456789, time.UTC), `"2026-11-23T10:00:00.123456+00:00"`},
		{"whole seconds keep six digits", time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC), `"2026-11-23T10:00:00.000000+00:00"`},
		{"offsets are numeric", time.Date(2026, 1, 2, 3, 4, 5, 600000000, east), `"2026-01-02T03:04:05.600000+05:30"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(struct {
				T gym.Time `json:"t"`
			}{gym.TimeOf(tt.in)})
			if err != nil {
				t.Fatal(err)
			}
			if got := string(b); got != `{"t":`+tt.want+`}` {
				t.Errorf("got %s, want {\"t\":%s}", got, tt.want)
			}
			if !iso39.MatchString(tt.want[1 : len(tt.want)-1]) {
				t.Errorf("%s is outside Python 3.9's fromisoformat", tt.want)
			}
			var back gym.Time
			if err := json.Unmarshal([]byte(tt.want), &back); err != nil {
				t.Fatal(err)
			}
			if !back.Equal(tt.in.Truncate(time.Microsecond)) {
				t.Errorf("read back %v, want %v", back, tt.in.Truncate(time.Microsecond))
			}
		})
	}
	// Files written before, with Go's RFC 3339 nanoseconds, still load.
	var old gym.Time
	if err := json.Unmarshal([]byte(`"2026-11-23T10:00:00.123456789Z"`), &old); err != nil || old.Nanosecond() != 123456789 {
		t.Errorf("old format: %v, %v", old, err)
	}
	if err := json.Unmarshal([]byte(`"yesterday"`), &old); err == nil {
		t.Error("a bad time was accepted")
	}
}
