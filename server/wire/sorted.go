package wire

import (
	"slices"

	"github.com/vmihailenco/msgpack/v5"
)

// SortedMap is a string-keyed map that encodes with its keys in sorted
// order. The encoder sorts only maps of interface values itself
// (SetSortMapKeys), so typed maps in frames use SortedMap: equal values must
// give equal bytes (tool schemas are part of every prompt, and prompt caches
// and reproducible runs compare bytes).
type SortedMap[V any] map[string]V

// EncodeMsgpack encodes m as a msgpack map with sorted keys; nil as nil.
func (m SortedMap[V]) EncodeMsgpack(e *msgpack.Encoder) error {
	if m == nil {
		return e.EncodeNil()
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if err := e.EncodeMapLen(len(keys)); err != nil {
		return err
	}
	for _, k := range keys {
		if err := e.EncodeString(k); err != nil {
			return err
		}
		if err := e.Encode(m[k]); err != nil {
			return err
		}
	}
	return nil
}

var _ msgpack.CustomEncoder = SortedMap[int](nil)
