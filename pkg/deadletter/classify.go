package deadletter

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"sync"
)

// ClassID is the stable id of a failure class: a hash of its pattern, so
// the same error text gets the same id on every machine and every day.
// Texts repeat (one failure mode, thousands of rows), so ids are memoised.
func ClassID(errorMessage string) string {
	classMu.Lock()
	id, ok := classMemo[errorMessage]
	classMu.Unlock()
	if ok {
		return id
	}
	n := normalizers.Get().(*normalizer)
	h := sha256.Sum256(n.normalize(errorMessage))
	normalizers.Put(n)
	id = hex.EncodeToString(h[:4])
	classMu.Lock()
	if len(classMemo) >= 1<<12 {
		clear(classMemo) // bounded: distinct texts (ids in them) must not grow it forever
	}
	// A copy: the text may be a slice of a larger string (a row's).
	classMemo[strings.Clone(errorMessage)] = id
	classMu.Unlock()
	return id
}

var (
	classMu   sync.Mutex
	classMemo = map[string]string{}
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
