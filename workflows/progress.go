package workflows

import (
	"fmt"

	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/workflow"
)

// progress records a workflow's steps, for its result and the step query,
// and keeps its current details (the Temporal UI's) up to date.
type progress struct {
	log   log.Logger
	steps []string
	ctx   workflow.Context
	// details, when set, renders the current details around the latest
	// step (ui.go).
	details func(step string) string
}

// track starts recording and answers StepQuery with the latest step.
func track(ctx workflow.Context) (*progress, error) {
	p := &progress{log: workflow.GetLogger(ctx), ctx: ctx}
	err := workflow.SetQueryHandler(ctx, StepQuery, func() (string, error) { return p.current(), nil })
	return p, err
}

// step records that the workflow is now doing, or has found, something.
func (p *progress) step(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	p.log.Info(s)
	p.steps = append(p.steps, s)
	p.show()
}

// show rewrites the current details, when the workflow has any.
func (p *progress) show() {
	if p.details != nil {
		workflow.SetCurrentDetails(p.ctx, p.details(p.current()))
	}
}

func (p *progress) current() string {
	if len(p.steps) == 0 {
		return "starting"
	}
	return p.steps[len(p.steps)-1]
}
