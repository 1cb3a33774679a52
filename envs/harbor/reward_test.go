package harbor_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gymserver/gymserver/envs/harbor"
)

func TestParseReward(t *testing.T) {
	const none = "\x00absent" // marks a file that does not exist
	for _, tc := range []struct {
		name, txt, js string
		want          harbor.Reward
	}{
		{"txt", "1\n", none, harbor.Reward{Value: 1, Metrics: map[string]float64{"reward": 1}, Source: "reward.txt", Key: "reward"}},
		{"txt_spaces", "  0.25 \r\n", none, harbor.Reward{Value: 0.25, Metrics: map[string]float64{"reward": 0.25}, Source: "reward.txt", Key: "reward"}},
		{"txt_out_of_range", "-2.5", none, harbor.Reward{Value: -2.5, Metrics: map[string]float64{"reward": -2.5}, Source: "reward.txt", Key: "reward", OutOfRange: true}},
		{"json_reward", none, `{"reward": 0.5, "passed": 3, "name": "x", "ok": true, "list": [1]}`,
			harbor.Reward{Value: 0.5, Metrics: map[string]float64{"reward": 0.5, "passed": 3}, Source: "reward.json", Key: "reward"}},
		{"json_wins_over_txt", "0", `{"reward": 1}`,
			harbor.Reward{Value: 1, Metrics: map[string]float64{"reward": 1}, Source: "reward.json", Key: "reward"}},
		{"json_details_txt_scalar", "0.75\n", `{"f2p_passed": 3, "f2p_total": 4, "resolved": false}`,
			harbor.Reward{Value: 0.75, Metrics: map[string]float64{"reward": 0.75, "f2p_passed": 3, "f2p_total": 4}, Source: "reward.txt", Key: "reward"}},
		{"json_single_metric", none, `{"accuracy": 0.9, "notes": "fine"}`,
			harbor.Reward{Value: 0.9, Metrics: map[string]float64{"accuracy": 0.9}, Source: "reward.json", Key: "accuracy"}},
		{"json_out_of_range", none, `{"reward": 42}`,
			harbor.Reward{Value: 42, Metrics: map[string]float64{"reward": 42}, Source: "reward.json", Key: "reward", OutOfRange: true}},
		{"json_side_metric_overflow", none, `{"reward": 1, "big": 1e999}`,
			harbor.Reward{Value: 1, Metrics: map[string]float64{"reward": 1}, Source: "reward.json", Key: "reward"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := harbor.ParseReward([]byte(tc.txt), []byte(tc.js), tc.txt != none, tc.js != none)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("reward (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseRewardErrors(t *testing.T) {
	const none = "\x00absent"
	for _, tc := range []struct {
		name, txt, js string
		want          error
		mention       string
	}{
		{"none", none, none, harbor.ErrRewardMissing, "reward.txt"},
		{"txt_empty", "", none, harbor.ErrRewardEmpty, "reward.txt"},
		{"txt_blank", "\n", none, harbor.ErrRewardUnparsable, "reward.txt"},
		{"txt_words", "PASSED", none, harbor.ErrRewardUnparsable, `"PASSED"`},
		{"txt_two_numbers", "1\n0\n", none, harbor.ErrRewardUnparsable, "reward.txt"},
		{"txt_nan", "nan", none, harbor.ErrRewardNotFinite, "reward.txt"},
		{"txt_inf", "-Inf", none, harbor.ErrRewardNotFinite, "reward.txt"},
		{"txt_overflow", "1e999", none, harbor.ErrRewardNotFinite, "reward.txt"},
		{"json_empty", "1", "", harbor.ErrRewardEmpty, "reward.json"},
		{"json_bad", none, `{"reward": `, harbor.ErrRewardUnparsable, "reward.json"},
		{"json_array", none, `[1]`, harbor.ErrRewardUnparsable, "not a JSON object"},
		{"json_two_values", none, `{"reward": 1} {"reward": 0}`, harbor.ErrRewardUnparsable, "more than one"},
		{"json_reward_overflow", none, `{"reward": 1e999}`, harbor.ErrRewardNotFinite, `"reward"`},
		{"json_no_key", none, `{"a": 1, "b": 0}`, harbor.ErrRewardNoKey, `["a" "b"]`},
		{"json_no_numbers", none, `{"reward": "1.0"}`, harbor.ErrRewardNoKey, `no "reward" key`},
		{"json_bad_txt_fallback", "oops", `{"a": 1}`, harbor.ErrRewardUnparsable, `reward.json has no "reward" key`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := harbor.ParseReward([]byte(tc.txt), []byte(tc.js), tc.txt != none, tc.js != none)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %+v, %v; want %v", got, err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.mention) {
				t.Errorf("error %q does not mention %q", err, tc.mention)
			}
		})
	}
}
