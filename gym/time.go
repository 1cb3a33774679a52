package gym

import "time"

// TimeLayout is how Time is written: ISO 8601 with exactly six fractional
// digits and a numeric UTC offset, "2026-11-23T10:00:00.123456+00:00".
// It is the form Python's datetime.isoformat writes for an aware time, and
// datetime.fromisoformat reads it on every Python 3 version; before 3.11
// fromisoformat rejects nanoseconds and a "Z" suffix, which Go's RFC 3339
// encoding writes.
const TimeLayout = "2006-01-02T15:04:05.000000-07:00"

// Time is a time.Time written in JSON as TimeLayout, at microsecond
// precision. It reads any RFC 3339 time, so files written before keep
// loading.
type Time struct{ time.Time }

// TimeOf returns t as a Time.
func TimeOf(t time.Time) Time { return Time{t} }

// MarshalJSON writes t as TimeLayout.
func (t Time) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, len(TimeLayout)+2)
	b = append(b, '"')
	b = t.Time.AppendFormat(b, TimeLayout)
	return append(b, '"'), nil
}

// UnmarshalJSON reads an RFC 3339 time.
func (t *Time) UnmarshalJSON(b []byte) error { return t.Time.UnmarshalJSON(b) }
