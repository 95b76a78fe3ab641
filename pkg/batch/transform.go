package batch

import (
	"encoding/json"
	"fmt"

	"github.com/itchyny/gojq"
)

// CompileTransform turns a jq expression into a payload function that
// must yield exactly one value.
func CompileTransform(expr string) (func(json.RawMessage) (json.RawMessage, error), error) {
	q, err := gojq.Parse(expr)
	if err != nil {
		return nil, err
	}
	code, err := gojq.Compile(q)
	if err != nil {
		return nil, err
	}
	return func(in json.RawMessage) (json.RawMessage, error) {
		var v any
		if err := json.Unmarshal(in, &v); err != nil {
			return nil, fmt.Errorf("payload is not JSON: %v", err)
		}
		it := code.Run(v)
		out, ok := it.Next()
		if !ok {
			return nil, fmt.Errorf("the expression yielded nothing")
		}
		if err, isErr := out.(error); isErr {
			return nil, err
		}
		if _, more := it.Next(); more {
			return nil, fmt.Errorf("the expression yielded more than one value")
		}
		return json.Marshal(out)
	}, nil
}
