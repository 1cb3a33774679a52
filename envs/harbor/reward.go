package harbor

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// The verifier's files, under /logs/verifier in the sandbox.
const (
	VerifierDir    = "/logs/verifier"
	RewardTxtFile  = "reward.txt"
	RewardJSONFile = "reward.json"
	TestStdoutFile = "test-stdout.txt"
	// RewardKey is the metric that holds the reward in reward.json.
	RewardKey = "reward"
)

// Reward errors; ParseReward's errors wrap exactly one of them.
var (
	// ErrRewardMissing is a verifier that wrote neither reward file.
	ErrRewardMissing = errors.New("no reward file")
	// ErrRewardEmpty is an empty reward file.
	ErrRewardEmpty = errors.New("empty reward file")
	// ErrRewardUnparsable is a reward.txt that is not one number or a
	// reward.json that is not a JSON object.
	ErrRewardUnparsable = errors.New("unparsable reward file")
	// ErrRewardNotFinite is a reward that is NaN or infinite.
	ErrRewardNotFinite = errors.New("reward is not a finite number")
	// ErrRewardNoKey is a reward.json without a "reward" key, without a
	// reward.txt, and with other than exactly one numeric metric.
	ErrRewardNoKey = errors.New("no reward in reward.json")
)

// Reward is the verifier's verdict.
type Reward struct {
	// Value is the reward, as the verifier wrote it: Harbor allows any
	// float, so a value outside [0, 1] is kept and flagged by OutOfRange
	// for the caller to decide.
	Value float64
	// Metrics holds reward.json's numeric values (booleans, strings,
	// arrays, objects and non-finite numbers are ignored, as Harbor
	// ignores non-numbers) plus "reward" when it came from reward.txt;
	// for reward.txt alone it is {"reward": Value}.
	Metrics map[string]float64
	// Source is the file Value came from, RewardJSONFile or RewardTxtFile.
	Source string
	// Key is the metric that holds Value.
	Key string
	// OutOfRange is true when Value is outside [0, 1].
	OutOfRange bool
}

// ParseReward reads the verifier's reward files with Harbor's precedence:
// reward.json when it exists, taking its "reward" key; else, when
// reward.txt exists too, reward.txt's number (added to the metrics as
// "reward"); else, its only numeric metric. Without reward.json, reward.txt
// alone. txt and js are the files' contents; haveTxt and haveJSON say
// whether each file exists (an existing file may be empty).
//
// A reward.txt that is present but unusable is an error even when
// reward.json is the source: the task meant it to be the reward. (Harbor
// ignores it and goes on without a "reward".)
func ParseReward(txt, js []byte, haveTxt, haveJSON bool) (Reward, error) {
	switch {
	case haveJSON:
		return parseRewardJSON(txt, js, haveTxt)
	case haveTxt:
		v, err := parseRewardTxt(txt)
		if err != nil {
			return Reward{}, err
		}
		return newReward(v, map[string]float64{RewardKey: v}, RewardTxtFile, RewardKey), nil
	}
	return Reward{}, fmt.Errorf("%s: neither %s nor %s: %w", VerifierDir, RewardTxtFile, RewardJSONFile, ErrRewardMissing)
}

func newReward(v float64, metrics map[string]float64, source, key string) Reward {
	return Reward{Value: v, Metrics: metrics, Source: source, Key: key, OutOfRange: v < 0 || v > 1}
}

// parseRewardTxt reads one number; white space around it is allowed.
func parseRewardTxt(txt []byte) (float64, error) {
	s := strings.TrimSpace(string(txt))
	if len(txt) == 0 {
		return 0, fmt.Errorf("%s: %w", RewardTxtFile, ErrRewardEmpty)
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, fmt.Errorf("%s: %q is not a number: %w", RewardTxtFile, clip(s, 80), ErrRewardUnparsable)
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("%s: %q: %w", RewardTxtFile, clip(s, 80), ErrRewardNotFinite)
	}
	return v, nil
}

func parseRewardJSON(txt, js []byte, haveTxt bool) (Reward, error) {
	if len(js) == 0 {
		return Reward{}, fmt.Errorf("%s: %w", RewardJSONFile, ErrRewardEmpty)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	var raw any
	if err := dec.Decode(&raw); err != nil {
		return Reward{}, fmt.Errorf("%s: %v: %w", RewardJSONFile, err, ErrRewardUnparsable)
	}
	if dec.More() {
		return Reward{}, fmt.Errorf("%s: more than one JSON value: %w", RewardJSONFile, ErrRewardUnparsable)
	}
	obj, ok := raw.(map[string]any)
	if !ok {
		return Reward{}, fmt.Errorf("%s: not a JSON object: %w", RewardJSONFile, ErrRewardUnparsable)
	}
	metrics := map[string]float64{}
	var rewardNotFinite bool
	for k, v := range obj {
		n, ok := v.(json.Number)
		if !ok {
			continue
		}
		f, err := strconv.ParseFloat(string(n), 64)
		if math.IsInf(f, 0) || (err != nil && !errors.Is(err, strconv.ErrRange)) {
			if k == RewardKey {
				rewardNotFinite = true
			}
			continue
		}
		metrics[k] = f
	}
	if rewardNotFinite {
		return Reward{}, fmt.Errorf("%s: key %q: %w", RewardJSONFile, RewardKey, ErrRewardNotFinite)
	}
	if v, ok := metrics[RewardKey]; ok {
		return newReward(v, metrics, RewardJSONFile, RewardKey), nil
	}
	if haveTxt {
		v, err := parseRewardTxt(txt)
		if err != nil {
			return Reward{}, fmt.Errorf("%s has no %q key, and %w", RewardJSONFile, RewardKey, err)
		}
		metrics[RewardKey] = v
		return newReward(v, metrics, RewardTxtFile, RewardKey), nil
	}
	if len(metrics) == 1 {
		for k, v := range metrics {
			return newReward(v, metrics, RewardJSONFile, k), nil
		}
	}
	keys := make([]string, 0, len(metrics))
	for k := range metrics {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return Reward{}, fmt.Errorf("%s: no %q key, no %s, and %d numeric metrics %q instead of one: %w",
		RewardJSONFile, RewardKey, RewardTxtFile, len(keys), keys, ErrRewardNoKey)
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
