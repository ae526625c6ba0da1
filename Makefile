# The test command README and CI run.
.PHONY: test build fuzz bench

GO ?= go
# e2e, the only package whose tests start a Temporal server, links it:
# its test binary is large and slow to build, so it runs without the
# race detector.
RACE_PKGS = $(shell $(GO) list ./... | grep -v /e2e)

build:
	$(GO) build -o bin/tessera ./cmd/tessera

# The planner's allocation counts mean nothing under the race detector (it
# makes sync.Pool drop items): its test skips them there, so it runs once
# more without it. TPC-H's load through a router built with the race
# detector takes minutes: TestTPCH too runs without it.
test:
	$(GO) test -race -count=1 -timeout 20m $(RACE_PKGS)
	$(GO) test -count=1 -run TestAllocations ./router/planner/
	$(GO) test -count=1 -run TestTPCH ./router/fidelity/
	$(GO) test -count=1 -timeout 30m -skip TestClusterOfSeparateHosts ./e2e/
	$(GO) test -count=1 -timeout 15m -v -run TestClusterOfSeparateHosts ./e2e/

# A short coverage-guided run of every fuzz target (their seed corpora
# already run as ordinary tests in `make test`).
fuzz:
	$(GO) test -run XXX -fuzz FuzzParse -fuzztime 30s ./topo/
	$(GO) test -run XXX -fuzz FuzzCanonical -fuzztime 30s ./topo/shardfunc/
	$(GO) test -run XXX -fuzz FuzzIntFormatsAgree -fuzztime 15s ./topo/shardfunc/
	$(GO) test -run XXX -fuzz FuzzClientMessages -fuzztime 30s ./router/
	$(GO) test -run XXX -fuzz FuzzPreAuth -fuzztime 30s ./router/
	$(GO) test -run XXX -fuzz FuzzPlan -fuzztime 30s ./router/planner/
	$(GO) test -run XXX -fuzz FuzzSplitInsert -fuzztime 30s ./router/planner/
	$(GO) test -run XXX -fuzz FuzzSplit -fuzztime 30s ./router/copysplit/
	$(GO) test -run XXX -fuzz FuzzDemoteFatal -fuzztime 15s ./sidecar/
	$(GO) test -run XXX -fuzz FuzzFrameCodec -fuzztime 30s ./sidecar/
	$(GO) test -run XXX -fuzz FuzzClassify -fuzztime 30s ./ddl/
	$(GO) test -run XXX -fuzz FuzzCopyRouter -fuzztime 30s ./replicator/

bench:
	$(GO) test -run XXX -bench . -benchmem ./topo/... ./router/... ./sidecar
