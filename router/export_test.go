package router

// SetCommitStepHook makes the router call hook at each step of an atomic
// commit (atomic.go, commitStep): tests kill a router process there.
func SetCommitStepHook(hook func(step string)) { commitStepHook = hook }

// CommitSteps are the steps SetCommitStepHook's hook is called at.
var CommitSteps = []string{stepPrepared, stepRecorded, stepCommitPointAnswered, stepDecided, stepFinished}
