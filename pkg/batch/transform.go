package batch

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/dlqctl/dlqctl/pkg/jq"
)

// CompileTransform turns a transform's jq expression into a payload
// function that must yield exactly one value, under jq's budget and the
// caller's context.
func CompileTransform(expr string) (func(context.Context, json.RawMessage) (json.RawMessage, error), error) {
	p, err := jq.Compile(transformName, expr, jq.Transform)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, in json.RawMessage) (json.RawMessage, error) {
		var v any
		if err := json.Unmarshal(in, &v); err != nil {
			return nil, fmt.Errorf("payload is not JSON: %v", err)
		}
		out, err := p.One(ctx, v, "the payload")
		if err != nil {
			return nil, err
		}
		return json.Marshal(out)
	}, nil
}
