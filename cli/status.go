package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tesseradb/tessera/sidecar"
	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
	"github.com/tesseradb/tessera/tlsfiles"
	"github.com/tesseradb/tessera/topo/store"
)

// instanceStatus is one line of `tessera status`.
type instanceStatus struct {
	Shard       string `json:"shard"`
	Instance    string `json:"instance"`
	Role        string `json:"role"`
	Zone        string `json:"zone,omitempty"`
	Serving     bool   `json:"serving"`
	Writable    bool   `json:"writable"`
	Fenced      bool   `json:"fenced"`
	DiskLow     bool   `json:"disk_low"`
	CurrentLSN  string `json:"current_lsn,omitempty"`
	ReceiveLSN  string `json:"receive_lsn,omitempty"`
	ReplayLSN   string `json:"replay_lsn,omitempty"`
	LagBytes    uint64 `json:"lag_bytes"`
	ReplayLagMs int64  `json:"replay_lag_ms"`
	Postgres    string `json:"postgres"`
	Sidecar     string `json:"sidecar"`
	Error       string `json:"error,omitempty"`
}

// statusReport is `tessera status --json`: the instances, and what the
// control plane records per shard (recorded primary, term, durability,
// buffering).
type statusReport struct {
	Instances []instanceStatus   `json:"instances"`
	Shards    []store.ShardState `json:"shards"`
}

func newStatusCommand() *cobra.Command {
	var flags clusterFlags
	var asJSON bool
	var sidecarTLS tlsfiles.Client
	cmd := &cobra.Command{
		Use:   "status [--json]",
		Short: "Show every shard's instances with role, health, LSNs and lag",
		Long: `Show every shard's instances, as registered in the topology service, with
their role, health, WAL positions and replication lag, asked of each sidecar.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := flags.dial(cmd.Context())
			if err != nil {
				return err
			}
			defer s.Close()
			secret, err := flags.secret()
			if err != nil {
				return err
			}
			tlsConfig, err := sidecarTLS.Config()
			if err != nil {
				return err
			}
			rows, err := collectStatus(cmd.Context(), s, sidecar.DialOptions{Secret: secret, TLS: tlsConfig})
			if err != nil {
				return err
			}
			if asJSON {
				states, err := s.ListShardStates(cmd.Context())
				if err != nil {
					return err
				}
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(statusReport{Instances: rows, Shards: states})
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 2, 4, 2, ' ', 0)
			fmt.Fprintln(w, "SHARD\tINSTANCE\tROLE\tHEALTH\tCURRENT LSN\tREPLAY LSN\tLAG\tPOSTGRES\tSIDECAR")
			for _, r := range rows {
				lsn := r.CurrentLSN
				if r.Role == store.RoleReplica {
					lsn = r.ReceiveLSN
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Shard, r.Instance, r.Role, health(r), dash(lsn), dash(r.ReplayLSN),
					lag(r), r.Postgres, r.Sidecar)
			}
			if err := w.Flush(); err != nil {
				return err
			}
			return printShardStates(cmd, s)
		},
	}
	flags.register(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	tlsClientFlags(cmd.Flags(), "sidecar", "the sidecars", &sidecarTLS)
	return cmd
}

// printShardStates adds what the control plane records per shard: the
// primary routers write to, its term, the durability policy and whether
// routers are asked to buffer.
func printShardStates(cmd *cobra.Command, s *store.Store) error {
	states, err := s.ListShardStates(cmd.Context())
	if err != nil || len(states) == 0 {
		return err
	}
	w := tabwriter.NewWriter(cmd.OutOrStdout(), 2, 4, 2, ' ', 0)
	fmt.Fprintln(w, "\nSHARD\tRECORDED PRIMARY\tTERM\tDURABILITY\tBUFFERING")
	for _, st := range states {
		buffering := "-"
		if st.Buffering(time.Now()) {
			buffering = fmt.Sprintf("%s, until %s", st.Buffer.Reason, st.Buffer.Until.Format(time.RFC3339))
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\n", st.Shard, dash(st.Primary), st.Term, st.Durability.OrDefault(), buffering)
	}
	return w.Flush()
}

func health(r instanceStatus) string {
	switch {
	case r.Error != "":
		return "down: " + r.Error
	case !r.Serving:
		return "not serving"
	case r.Fenced:
		return "fenced"
	case r.DiskLow:
		return "disk low"
	case r.Writable:
		return "writable"
	}
	return "serving"
}

func lag(r instanceStatus) string {
	if r.Role != store.RoleReplica {
		return "-"
	}
	return fmt.Sprintf("%dB %dms", r.LagBytes, r.ReplayLagMs)
}

func dash(s string) string {
	if s == "" || s == "0/0" {
		return "-"
	}
	return s
}

// collectStatus asks every registered sidecar for its status, in
// parallel, each with a short deadline so one dead instance does not hold
// the others up.
func collectStatus(ctx context.Context, s *store.Store, dial sidecar.DialOptions) ([]instanceStatus, error) {
	records, err := s.ListRecords(ctx, store.KindSidecar)
	if err != nil {
		return nil, err
	}
	rows := make([]instanceStatus, len(records))
	done := make(chan struct{}, len(records))
	for i, rec := range records {
		rows[i] = instanceStatus{Shard: rec.ShardUID, Instance: rec.InstanceID, Role: rec.Role, Zone: rec.Zone, Postgres: rec.PostgresAddr, Sidecar: rec.GRPCAddr}
		go func(r *instanceStatus) {
			defer func() { done <- struct{}{} }()
			c, err := sidecar.Dial(r.Sidecar, dial)
			if err != nil {
				r.Error = err.Error()
				return
			}
			defer c.Close()
			cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			st, err := c.Status(cctx, &pb.StatusRequest{})
			if err != nil {
				r.Error = sidecar.ErrorFromStatus(err).Error()
				return
			}
			fill(r, st.Health)
		}(&rows[i])
	}
	for range records {
		<-done
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].Shard != rows[j].Shard {
			return rows[i].Shard < rows[j].Shard
		}
		return rows[i].Instance < rows[j].Instance
	})
	return rows, nil
}

func fill(r *instanceStatus, h *pb.HealthStatus) {
	if h.Role != "" {
		r.Role = h.Role
	}
	r.Serving, r.Writable, r.Fenced, r.DiskLow = h.Serving, h.Writable, h.Fenced, h.DiskLow
	r.CurrentLSN, r.ReceiveLSN, r.ReplayLSN = h.CurrentLsn, h.ReceiveLsn, h.ReplayLsn
	r.LagBytes, r.ReplayLagMs = h.LagBytes, h.ReplayLagMs
	if h.Error != "" {
		r.Error = h.Error
	}
}
