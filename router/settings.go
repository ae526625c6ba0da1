package router

import (
	"context"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/tesseradb/tessera/pgerr"
	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
)

// sessionSettings are the client session's settings: the ones Postgres
// keeps (sent with every batch so that whichever backend serves the
// session carries them) and Tessera's own (tessera.*), which only the
// router reads.
type sessionSettings struct {
	list []*pb.Setting // shared with batches: replaced, never modified
	// startup are the settings the client gave at startup: what RESET
	// returns to, as in Postgres.
	startup []*pb.Setting

	txMode string // tessera.tx_mode: "multi" (default) or "single"
	// commit: tessera.commit, "atomic" (two-phase commit across shards,
	// the default) or "best_effort" (shard after shard; atomic.go).
	commit string
	// commitDefault: the router's default for commit (Config.Commit).
	commitDefault string
	fanout        string // tessera.fanout: "scatter" (default), "multi" or "single"
	target        string // tessera.target: "primary" (default) or "replica"
	// ddlStrategy: tessera.ddl_strategy, "direct" (default), "online" or
	// "online_wait" (ddlstrategy.go).
	ddlStrategy string
	// tessera.auto_prepare: "on" or "off" (autoprepare.go); its
	// default is the router's (Config.NoAutoPrepare).
	autoPrep, autoPrepDefault string
	// queryMemory: tessera.query_memory in bytes, what one query's
	// sorts and aggregations hold before they spill (memory.go); 0: the
	// default.
	queryMemory int64
	// gatherLimit: tessera.gather_limit, the most bytes of rows one
	// statement may gather (gather.go); "" is the default.
	gatherLimit string
	// gather: tessera.gather, "on" (default) or "off" (refuse instead).
	gather string
}

func autoPrepDefault(off bool) string {
	if off {
		return "off"
	}
	return "on"
}

// set records a Postgres setting.
func (s *sessionSettings) set(name, value string) {
	name = strings.ToLower(name)
	list := make([]*pb.Setting, 0, len(s.list)+1)
	for _, x := range s.list {
		if x.Name != name {
			list = append(list, x)
		}
	}
	s.list = append(list, &pb.Setting{Name: name, Value: value})
}

// reset returns a setting to its session default (the startup value, or
// the server's); "all" resets every one.
func (s *sessionSettings) reset(name string) {
	name = strings.ToLower(name)
	if name == "all" {
		s.list = s.startup
		return
	}
	list := make([]*pb.Setting, 0, len(s.list))
	for _, x := range s.list {
		if x.Name != name {
			list = append(list, x)
		}
	}
	for _, x := range s.startup {
		if x.Name == name {
			list = append(list, x)
		}
	}
	s.list = list
}

func (s *sessionSettings) get(name string) (string, bool) {
	for _, x := range s.list {
		if x.Name == name {
			return x.Value, true
		}
	}
	return "", false
}

// validateTessera checks a value of one of Tessera's own settings.
func (s *sessionSettings) validateTessera(name, value string) (string, error) {
	probe := *s
	return value, probe.setTessera(name, value)
}

// setTessera sets one of Tessera's own settings.
func (s *sessionSettings) setTessera(name, value string) error {
	value = strings.Trim(value, "'\" ")
	if strings.EqualFold(name, "tessera.query_memory") {
		// Units are case-sensitive, as in Postgres.
		if strings.EqualFold(value, "default") {
			s.queryMemory = 0
			return nil
		}
		n, err := parseQueryMemory(value)
		if err == nil {
			s.queryMemory = n
		}
		return err
	}
	value = strings.ToLower(value)
	switch strings.ToLower(name) {
	case "tessera.tx_mode":
		if value != "single" && value != "multi" && value != "default" {
			return pgerr.New(pgerr.InvalidParameterValue, `invalid value for parameter "tessera.tx_mode": %q (single or multi)`, value)
		}
		s.txMode = value
	case "tessera.commit":
		if value != commitAtomic && value != commitBestEffort && value != "default" {
			return pgerr.New(pgerr.InvalidParameterValue, `invalid value for parameter "tessera.commit": %q (atomic or best_effort)`, value)
		}
		s.commit = value
	case "tessera.fanout":
		if value != "single" && value != "multi" && value != "scatter" && value != "default" {
			return pgerr.New(pgerr.InvalidParameterValue, `invalid value for parameter "tessera.fanout": %q (single, multi or scatter)`, value)
		}
		s.fanout = value
	case "tessera.target":
		if value != "primary" && value != "replica" && value != "default" {
			return pgerr.New(pgerr.InvalidParameterValue, `invalid value for parameter "tessera.target": %q (primary or replica)`, value)
		}
		s.target = value
	case "tessera.ddl_strategy":
		if value != ddlDirect && value != ddlOnline && value != ddlOnlineWait && value != "default" {
			return pgerr.New(pgerr.InvalidParameterValue, `invalid value for parameter "tessera.ddl_strategy": %q (direct, online or online_wait)`, value)
		}
		s.ddlStrategy = value
	case "tessera.auto_prepare":
		v, err := onOff(name, value)
		if err != nil {
			return err
		}
		s.autoPrep = v
	case "tessera.gather":
		v, err := onOff(name, value)
		if err != nil {
			return err
		}
		s.gather = v
	case "tessera.gather_limit":
		if _, err := parseGatherLimit(value); err != nil && value != "default" {
			return pgerr.New(pgerr.InvalidParameterValue, `invalid value for parameter "tessera.gather_limit": %q (bytes, or a number of kB, MB or GB)`, value)
		}
		s.gatherLimit = value
	default:
		return pgerr.New(pgerr.UndefinedObject, "unrecognized configuration parameter %q", name)
	}
	return nil
}

// onOff reads a boolean setting's value as Postgres reads a bool (on,
// true, yes, 1 and their opposites), keeping "default".
func onOff(name, value string) (string, error) {
	switch value {
	case "on", "true", "yes", "1":
		return "on", nil
	case "off", "false", "no", "0":
		return "off", nil
	case "default":
		return value, nil
	}
	return "", pgerr.New(pgerr.InvalidParameterValue, `invalid value for parameter "%s": %q (on or off)`, strings.ToLower(name), value)
}

// showTessera returns one of Tessera's own settings.
func (s *sessionSettings) showTessera(name string) (string, error) {
	pick := func(v, def string) string {
		if v == "" || v == "default" {
			return def
		}
		return v
	}
	switch strings.ToLower(name) {
	case "tessera.tx_mode":
		return pick(s.txMode, "multi"), nil
	case "tessera.commit":
		return pick(s.commit, pick(s.commitDefault, commitAtomic)), nil
	case "tessera.fanout":
		return pick(s.fanout, "scatter"), nil
	case "tessera.target":
		return pick(s.target, "primary"), nil
	case "tessera.ddl_strategy":
		return pick(s.ddlStrategy, ddlDirect), nil
	case "tessera.auto_prepare":
		return pick(s.autoPrep, pick(s.autoPrepDefault, "on")), nil
	case "tessera.query_memory":
		return FormatMemory(s.queryMemoryBytes()), nil
	case "tessera.gather":
		return pick(s.gather, "on"), nil
	case "tessera.gather_limit":
		return strconv.FormatInt(s.gatherLimitBytes(), 10), nil
	}
	return "", pgerr.New(pgerr.UndefinedObject, "unrecognized configuration parameter %q", name)
}

// withShown returns the settings a batch carries when it SHOWs Tessera's
// settings names through the extended protocol: a shard answers that SHOW
// from its session, which knows a tessera.* setting only once the client
// SET it, so each named one goes with the value the router would show
// (its default included). A SET earlier in the same batch still runs
// before the SHOW on the shard, as it would on one Postgres.
func (s *sessionSettings) withShown(names []string) []*pb.Setting {
	list := make([]*pb.Setting, 0, len(s.list)+len(names))
	shown := make(map[string]string, len(names))
	for _, name := range names {
		if v, err := s.showTessera(name); err == nil {
			shown[strings.ToLower(name)] = v
		}
	}
	for _, x := range s.list {
		if _, ok := shown[x.Name]; !ok {
			list = append(list, x)
		}
	}
	for name, v := range shown {
		list = append(list, &pb.Setting{Name: name, Value: v})
	}
	return list
}

// lossyFloatText reports a session whose extra_float_digits is below 1:
// its float4 and float8 values written as text lose digits, so the
// router cannot pass rows through their text forms (insertselect.go,
// keymove.go) unchanged.
func (s *sessionSettings) lossyFloatText() (int, bool) {
	v, ok := s.get("extra_float_digits")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(strings.Trim(v, `'" `))
	return n, err == nil && n < 1
}

// queryMemoryBytes is the session's memory budget per query.
func (s *sessionSettings) queryMemoryBytes() int64 {
	if s.queryMemory == 0 {
		return defaultQueryMemory
	}
	return s.queryMemory
}

// gatherLimitBytes is tessera.gather_limit in bytes.
func (s *sessionSettings) gatherLimitBytes() int64 {
	if n, err := parseGatherLimit(s.gatherLimit); err == nil {
		return n
	}
	return defaultGatherLimit
}

func (s *sessionSettings) replica() bool { return s.target == "replica" }

// atomicCommit reports whether a transaction that wrote on several shards
// commits with two-phase commit (tessera.commit).
func (s *sessionSettings) atomicCommit() bool {
	if s.commit == "" || s.commit == "default" {
		return s.commitDefault != commitBestEffort
	}
	return s.commit != commitBestEffort
}

// onlineDDL reports whether schema changes of one table start OnlineDDL
// migrations.
func (s *sessionSettings) onlineDDL() bool {
	return s.ddlStrategy == ddlOnline || s.ddlStrategy == ddlOnlineWait
}

func (s *sessionSettings) autoPrepare() bool {
	if s.autoPrep == "" || s.autoPrep == "default" {
		return s.autoPrepDefault != "off"
	}
	return s.autoPrep == "on"
}

// startupSetting takes a setting from the startup packet.
func (c *clientConn) startupSetting(name, value string) error {
	if strings.HasPrefix(strings.ToLower(name), "tessera.") {
		return c.settings.setTessera(name, value)
	}
	c.settings.set(name, value)
	c.settings.startup = c.settings.list
	return nil
}

// reportedParameters are the GUC_REPORT parameters as Postgres reports
// them to a new session; asking the authoritative shard with the
// session's settings also checks that the settings are valid.
func (c *clientConn) reportedParameters(ctx context.Context) ([][2]string, error) {
	shard, err := c.authoritativeShard()
	if err != nil {
		return nil, err
	}
	var out [][2]string
	err = c.srv.buffers.retryRead(ctx, shard, func() (err error) {
		out, err = c.readParameters(ctx, shard)
		return err
	})
	return out, err
}

func (c *clientConn) readParameters(ctx context.Context, shard string) ([][2]string, error) {
	b, err := c.session(ctx, shard, false)
	if err != nil {
		return nil, err
	}
	q, _ := (&pgproto3.Query{String: `SELECT name, setting FROM pg_catalog.pg_settings WHERE name IN
		('server_version', 'server_encoding', 'client_encoding', 'application_name', 'default_transaction_read_only',
		 'in_hot_standby', 'is_superuser', 'session_authorization', 'DateStyle', 'IntervalStyle', 'TimeZone',
		 'integer_datetimes', 'standard_conforming_strings')`}).Encode(nil)
	var raw []byte
	if _, err := c.run(b, &pb.Batch{Mode: pb.Mode_STATEMENT, Frontend: q}, func(chunk []byte, _ bool) error {
		raw = append(raw, chunk...)
		return nil
	}); err != nil {
		return nil, err
	}
	var out [][2]string
	var first error
	err = backendMessages(raw, func(typ byte, msg []byte) error {
		switch typ {
		case 'D':
			row, err := decodeDataRow(msg)
			if err == nil && len(row) == 2 {
				out = append(out, [2]string{row[0], row[1]})
			}
		case 'E':
			if first == nil {
				first = parseError(msg)
			}
		}
		return nil
	})
	if first != nil {
		return nil, first
	}
	return out, err
}

func (c *clientConn) authoritativeShard() (string, error) {
	snap := c.srv.topo.Current()
	if snap == nil {
		return "", pgerr.New(pgerr.ConfigFileError, "no data topology is stored")
	}
	return snap.Topology.AuthoritativeShard(), nil
}
