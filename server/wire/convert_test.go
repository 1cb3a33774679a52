package wire_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/server/wire"
)

// TestGymRoundTrip converts gym values with every field set (by
// reflection, so a field added to gym later is set too) to wire and back:
// a gym field that never reaches the wire fails here. (TestConversionsRoundTrip
// goes the other way, from the example frames.)
func TestGymRoundTrip(t *testing.T) {
	check := func(t *testing.T, want, got any) {
		t.Helper()
		if d := cmp.Diff(want, got, cmpopts.EquateEmpty()); d != "" {
			t.Errorf("gym -> wire -> gym loses (-want +got):\n%s", d)
		}
	}
	t.Run("EnvSpec", func(t *testing.T) {
		v := filled[gym.EnvSpec](t)
		check(t, v, wire.ToEnvSpec(wire.FromEnvSpec(v)))
	})
	t.Run("TaskSpecs", func(t *testing.T) {
		v := filled[[]gym.TaskSpec](t)
		check(t, v, wire.ToTaskSpecs(wire.FromTaskSpecs(v)))
	})
	t.Run("Reset", func(t *testing.T) {
		v := filled[gym.Reset](t)
		check(t, v, wire.ToReset(wire.FromReset(v)))
	})
	t.Run("StepResult", func(t *testing.T) {
		v := filled[gym.StepResult](t)
		check(t, v, wire.ToStepResult(wire.FromStepResult(v)))
	})
	t.Run("Evaluation", func(t *testing.T) {
		v := filled[gym.Evaluation](t)
		check(t, v, wire.ToEvaluation(wire.FromEvaluation(v)))
	})
	t.Run("Result", func(t *testing.T) {
		v := filled[gym.Result](t)
		check(t, v, wire.ToResult(wire.FromResult(v)))
	})
	t.Run("Snapshot", func(t *testing.T) {
		v := filled[gym.Snapshot](t)
		check(t, v, wire.ToSnapshot(wire.FromSnapshot(v)))
	})
	t.Run("Messages", func(t *testing.T) {
		v := filled[[]gym.Message](t)
		check(t, v, wire.ToMessages(wire.FromMessages(v)))
	})
	t.Run("Tools", func(t *testing.T) {
		v := filled[[]gym.Tool](t)
		check(t, v, wire.ToTools(wire.FromTools(v)))
	})
}

// filled returns a T with every exported field set to a value that
// survives the wire's conversions: strings, numbers, one-element slices
// and maps, whole-second times and durations.
func filled[T any](t *testing.T) T {
	t.Helper()
	var v T
	fill(reflect.ValueOf(&v).Elem(), "v", 0)
	return v
}

// maxFillDepth stops filling recursive types (a schema's items).
const maxFillDepth = 8

func fill(v reflect.Value, name string, depth int) {
	if depth > maxFillDepth {
		return
	}
	switch v.Type() {
	case reflect.TypeFor[time.Time]():
		v.Set(reflect.ValueOf(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)))
		return
	case reflect.TypeFor[gym.Duration]():
		v.Set(reflect.ValueOf(gym.Duration(1500 * time.Millisecond)))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(strings.ToLower(name))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(3)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(3)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(0.5)
	case reflect.Interface:
		v.Set(reflect.ValueOf(name))
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		fill(p.Elem(), name, depth+1)
		v.Set(p)
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fill(s.Index(0), name, depth+1)
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k := reflect.New(v.Type().Key()).Elem()
		fill(k, name+"_key", depth+1)
		e := reflect.New(v.Type().Elem()).Elem()
		fill(e, name, depth+1)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Struct:
		for i := range v.NumField() {
			if f := v.Type().Field(i); f.IsExported() {
				fill(v.Field(i), f.Name, depth+1)
			}
		}
	}
}
