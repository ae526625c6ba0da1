package ddl

import (
	"strings"
	"testing"
)

func TestCompare(t *testing.T) {
	base := func() TableDef {
		return TableDef{
			Columns: []ColumnDef{
				{Name: "id", Type: "bigint", NotNull: true},
				{Name: "qty", Type: "integer", NotNull: true, Default: "0"},
			},
			Constraints: map[string]string{"orders_pkey": "PRIMARY KEY (id)"},
			Indexes:     map[string]string{"orders_pkey": "CREATE UNIQUE INDEX orders_pkey ON public.orders USING btree (id)"},
		}
	}
	typeChanged := base()
	typeChanged.Columns[1].Type = "bigint"
	noColumn := base()
	noColumn.Columns = noColumn.Columns[:1]
	reordered := base()
	reordered.Columns[0], reordered.Columns[1] = reordered.Columns[1], reordered.Columns[0]
	extraIndex := base()
	extraIndex.Indexes = map[string]string{"orders_pkey": base().Indexes["orders_pkey"], "orders_qty": "CREATE INDEX orders_qty ON public.orders USING btree (qty) INVALID"}

	for _, tc := range []struct {
		name   string
		others TableDef
		want   []string // substrings, one per difference, in order
	}{
		{"same", base(), nil},
		{"type", typeChanged, []string{"column qty is bigint NOT NULL DEFAULT 0, integer NOT NULL DEFAULT 0 on s0"}},
		{"missing column", noColumn, []string{"column qty missing"}},
		{"order", reordered, []string{"column order (qty, id), (id, qty) on s0"}},
		{"extra index", extraIndex, []string{"extra index orders_qty"}},
	} {
		schemas := map[string]Schema{
			"s0": {"public.orders": base(), "public.only0": base()},
			"s1": {"public.orders": base()},
			"s2": {"public.orders": tc.others},
		}
		got := Compare([]string{"s0", "s1", "s2"}, schemas)
		if len(got) != len(tc.want) {
			t.Errorf("%s: %d differences %v, want %d", tc.name, len(got), got, len(tc.want))
			continue
		}
		for i, d := range got {
			if d.Table != "public.orders" || d.Shard != "s2" || d.Reference != "s0" || !strings.Contains(d.What, tc.want[i]) {
				t.Errorf("%s: difference %v, want public.orders on s2: %q", tc.name, d, tc.want[i])
			}
		}
	}
}
