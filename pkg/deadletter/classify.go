package deadletter

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"sync"
)

// ClassID is the stable id of a failure class: a hash of its pattern, so
// the same error text gets the same id on every machine and every day.
// Texts repeat (one failure mode, thousands of rows), so ids are memoised
// by text; and texts that differ only in their ids (an order number, a
// card) share a pattern, so ids are memoised by pattern too, and such a
// text is normalised but not hashed.
func ClassID(errorMessage string) string {
	classMu.Lock()
	id, ok := classMemo[errorMessage]
	classMu.Unlock()
	if ok {
		return id
	}
	n := normalizers.Get().(*normalizer)
	defer normalizers.Put(n)
	pattern := n.normalize(errorMessage)
	classMu.Lock()
	id, ok = patternMemo[string(pattern)]
	classMu.Unlock()
	if !ok {
		h := sha256.Sum256(pattern)
		id = hex.EncodeToString(h[:4])
	}
	classMu.Lock()
	// Bounded: distinct texts (ids in them) must not grow them forever.
	if len(classMemo) >= 1<<12 {
		clear(classMemo)
	}
	if len(patternMemo) >= 1<<12 {
		clear(patternMemo)
	}
	// A copy: the text may be a slice of a larger string (a row's).
	classMemo[strings.Clone(errorMessage)] = id
	if !ok {
		patternMemo[string(pattern)] = id
	}
	classMu.Unlock()
	return id
}

var (
	classMu     sync.Mutex
	classMemo   = map[string]string{} // text -> id
	patternMemo = map[string]string{} // normalised text -> id
)

// IsClassID reports whether s has the form of a class id (8 hex digits).
func IsClassID(s string) bool {
	if len(s) != 8 {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
