package worker

import (
	"context"
	"errors"
	"fmt"
	"sort"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/workflows"
)

// EnsureSearchAttributes registers in namespace the search attributes
// Tessera's workflows set (workflows.SearchAttributes) that it lacks. A
// workflow that sets an attribute its namespace does not have cannot make
// progress (Temporal fails its workflow task, again and again), so a
// worker that cannot register them does not start.
//
// Temporal may take a few seconds to use an attribute just registered; a
// workflow task that sets it meanwhile is retried.
func EnsureSearchAttributes(ctx context.Context, c client.Client, namespace string) error {
	ops := c.OperatorService()
	have, err := ops.ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: namespace})
	if err != nil {
		return fmt.Errorf("listing the search attributes of namespace %s: %w", namespace, err)
	}
	missing := map[string]enumspb.IndexedValueType{}
	for name, typ := range workflows.SearchAttributes {
		got, ok := have.GetCustomAttributes()[name]
		if !ok {
			missing[name] = typ
			continue
		}
		if got != typ {
			return pgerr.New(pgerr.ObjectNotInPrerequisiteState, "namespace %s has search attribute %s of type %s; Tessera needs type %s",
				namespace, name, got, typ)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	_, err = ops.AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{Namespace: namespace, SearchAttributes: missing})
	var exists *serviceerror.AlreadyExists
	if err != nil && !errors.As(err, &exists) {
		return pgerr.New(pgerr.ObjectNotInPrerequisiteState,
			"registering search attributes %s in namespace %s: %v (register them yourself, e.g. `temporal operator search-attribute create --namespace %s --name %s --type Keyword`)",
			names(missing), namespace, err, namespace, workflows.PhaseAttribute)
	}
	return nil
}

func names(m map[string]enumspb.IndexedValueType) []string {
	out := make([]string, 0, len(m))
	for n := range m {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
