package fidelity_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// The TPC-H data set of TestTPCH, written here from the specification's
// description (TPC-H 3.x, clause 4.2): its eight tables and columns, key
// spaces and value domains, so that the 22 queries with their validation
// parameters find rows. It is not dbgen: the text grammar is a short word
// list and the random streams are Go's, so the answers are not the
// specification's published ones; only the comparison of two databases
// holding the same rows matters here. Rows come out as multi-row INSERTs
// of literals (the router splits them by shard key; COPY into a sharded
// table is not supported yet), the same for both databases, from a fixed
// seed.

func tpchSchema() []string {
	return []string{
		`CREATE TABLE region (r_regionkey int PRIMARY KEY, r_name char(25) NOT NULL, r_comment varchar(152))`,
		`CREATE TABLE nation (n_nationkey int PRIMARY KEY, n_name char(25) NOT NULL, n_regionkey int NOT NULL, n_comment varchar(152))`,
		`CREATE TABLE supplier (s_suppkey int PRIMARY KEY, s_name char(25) NOT NULL, s_address varchar(40) NOT NULL,
			s_nationkey int NOT NULL, s_phone char(15) NOT NULL, s_acctbal numeric(15,2) NOT NULL, s_comment varchar(101) NOT NULL)`,
		`CREATE TABLE part (p_partkey int PRIMARY KEY, p_name varchar(55) NOT NULL, p_mfgr char(25) NOT NULL, p_brand char(10) NOT NULL,
			p_type varchar(25) NOT NULL, p_size int NOT NULL, p_container char(10) NOT NULL, p_retailprice numeric(15,2) NOT NULL,
			p_comment varchar(23) NOT NULL)`,
		`CREATE TABLE partsupp (ps_partkey int NOT NULL, ps_suppkey int NOT NULL, ps_availqty int NOT NULL,
			ps_supplycost numeric(15,2) NOT NULL, ps_comment varchar(199) NOT NULL, PRIMARY KEY (ps_partkey, ps_suppkey))`,
		`CREATE TABLE customer (c_custkey int PRIMARY KEY, c_name varchar(25) NOT NULL, c_address varchar(40) NOT NULL,
			c_nationkey int NOT NULL, c_phone char(15) NOT NULL, c_acctbal numeric(15,2) NOT NULL, c_mktsegment char(10) NOT NULL,
			c_comment varchar(117) NOT NULL)`,
		`CREATE TABLE orders (o_orderkey int PRIMARY KEY, o_custkey int NOT NULL, o_orderstatus char(1) NOT NULL,
			o_totalprice numeric(15,2) NOT NULL, o_orderdate date NOT NULL, o_orderpriority char(15) NOT NULL,
			o_clerk char(15) NOT NULL, o_shippriority int NOT NULL, o_comment varchar(79) NOT NULL)`,
		`CREATE TABLE lineitem (l_orderkey int NOT NULL, l_partkey int NOT NULL, l_suppkey int NOT NULL, l_linenumber int NOT NULL,
			l_quantity numeric(15,2) NOT NULL, l_extendedprice numeric(15,2) NOT NULL, l_discount numeric(15,2) NOT NULL,
			l_tax numeric(15,2) NOT NULL, l_returnflag char(1) NOT NULL, l_linestatus char(1) NOT NULL, l_shipdate date NOT NULL,
			l_commitdate date NOT NULL, l_receiptdate date NOT NULL, l_shipinstruct char(25) NOT NULL, l_shipmode char(10) NOT NULL,
			l_comment varchar(44) NOT NULL, PRIMARY KEY (l_orderkey, l_linenumber))`,
		// Indexes on the foreign keys (clause 1.5.4 allows them): without
		// them Postgres runs Q17's and Q20's correlated subqueries as a
		// scan of lineitem per row, minutes each at scale factor 0.1.
		`CREATE INDEX ON lineitem (l_partkey, l_suppkey)`,
		`CREATE INDEX ON orders (o_custkey)`,
		`CREATE INDEX ON partsupp (ps_suppkey)`,
		`CREATE INDEX ON customer (c_nationkey)`,
		`CREATE INDEX ON supplier (s_nationkey)`,
	}
}

var (
	tpchRegions = []string{"AFRICA", "AMERICA", "ASIA", "EUROPE", "MIDDLE EAST"}
	tpchNations = []struct {
		name   string
		region int
	}{{"ALGERIA", 0}, {"ARGENTINA", 1}, {"BRAZIL", 1}, {"CANADA", 1}, {"EGYPT", 4}, {"ETHIOPIA", 0},
		{"FRANCE", 3}, {"GERMANY", 3}, {"INDIA", 2}, {"INDONESIA", 2}, {"IRAN", 4}, {"IRAQ", 4}, {"JAPAN", 2},
		{"JORDAN", 4}, {"KENYA", 0}, {"MOROCCO", 0}, {"MOZAMBIQUE", 0}, {"PERU", 1}, {"CHINA", 2}, {"ROMANIA", 3},
		{"SAUDI ARABIA", 4}, {"VIETNAM", 2}, {"RUSSIA", 3}, {"UNITED KINGDOM", 3}, {"UNITED STATES", 1}}
	tpchColors = strings.Fields(`almond antique aquamarine azure beige bisque black blanched blue blush brown
		burlywood burnished chartreuse chiffon chocolate coral cornflower cornsilk cream cyan dark deep dim
		dodger drab firebrick floral forest frosted gainsboro ghost goldenrod green grey honeydew hot indian
		ivory khaki lace lavender lawn lemon light lime linen magenta maroon medium metallic midnight mint
		misty moccasin navajo navy olive orange orchid pale papaya peach peru pink plum powder puff purple
		red rose rosy royal saddle salmon sandy seashell sienna sky slate smoke snow spring steel tan thistle
		tomato turquoise violet wheat white yellow`)
	tpchTypes1     = []string{"STANDARD", "SMALL", "MEDIUM", "LARGE", "ECONOMY", "PROMO"}
	tpchTypes2     = []string{"ANODIZED", "BURNISHED", "PLATED", "POLISHED", "BRUSHED"}
	tpchTypes3     = []string{"TIN", "NICKEL", "BRASS", "STEEL", "COPPER"}
	tpchContainer1 = []string{"SM", "LG", "MED", "JUMBO", "WRAP"}
	tpchContainer2 = []string{"CASE", "BOX", "BAG", "JAR", "PKG", "PACK", "CAN", "DRUM"}
	tpchSegments   = []string{"AUTOMOBILE", "BUILDING", "FURNITURE", "MACHINERY", "HOUSEHOLD"}
	tpchPriorities = []string{"1-URGENT", "2-HIGH", "3-MEDIUM", "4-NOT SPECIFIED", "5-LOW"}
	tpchInstructs  = []string{"DELIVER IN PERSON", "COLLECT COD", "NONE", "TAKE BACK RETURN"}
	tpchModes      = []string{"REG AIR", "AIR", "RAIL", "SHIP", "TRUCK", "MAIL", "FOB"}
	tpchWords      = strings.Fields(`furiously quickly carefully blithely slyly final regular special express
		pending ironic bold even silent unusual requests deposits accounts packages theodolites instructions
		foxes pinto beans ideas dependencies platelets asymptotes courts dolphins sleep wake haggle nag use
		cajole boost detect among above across after along around`)
	tpchStart   = time.Date(1992, 1, 1, 0, 0, 0, 0, time.UTC)
	tpchCurrent = time.Date(1995, 6, 17, 0, 0, 0, 0, time.UTC)
	// Orders are dated up to ENDDATE (1998-12-31) less 151 days.
	tpchOrderDays = int(time.Date(1998, 12, 31, 0, 0, 0, 0, time.UTC).Sub(tpchStart).Hours()/24) - 151
)

// tpchGen holds the random stream and the sizes at one scale factor.
type tpchGen struct {
	r                        *rand.Rand
	parts, supps, custs, ord int
	batch                    int
}

func newTPCHGen(scale float64) *tpchGen {
	n := func(base float64) int { return max(1, int(base*scale+0.5)) }
	return &tpchGen{r: rand.New(rand.NewPCG(1992, 1998)), parts: n(200_000), supps: n(10_000),
		custs: n(150_000), ord: n(1_500_000), batch: 500}
}

func (g *tpchGen) between(lo, hi int) int { return lo + g.r.IntN(hi-lo+1) }

func (g *tpchGen) text(minWords, maxWords, maxLen int) string {
	n := g.between(minWords, maxWords)
	w := make([]string, n)
	for i := range w {
		w[i] = tpchWords[g.r.IntN(len(tpchWords))]
	}
	s := strings.Join(w, " ")
	if len(s) > maxLen {
		s = strings.TrimSpace(s[:maxLen])
	}
	return s
}

func (g *tpchGen) phone(nation int) string {
	return fmt.Sprintf("%02d-%03d-%03d-%04d", nation+10, g.between(100, 999), g.between(100, 999), g.between(1000, 9999))
}

// money writes cents as a decimal with two digits.
func money(cents int64) string {
	sign := ""
	if cents < 0 {
		sign, cents = "-", -cents
	}
	return fmt.Sprintf("%s%d.%02d", sign, cents/100, cents%100)
}

func day(t time.Time) string { return "'" + t.Format("2006-01-02") + "'" }

func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// retailPrice is P_RETAILPRICE in cents (clause 4.2.3).
func retailPrice(partkey int) int64 {
	return int64(90000 + (partkey/10)%20001 + 100*(partkey%1000))
}

// partSupplier is the i-th (0…3) supplier of a part (clause 4.2.3's
// formula; where it would repeat a supplier, which happens only with
// fewer suppliers than the specification's scales have, the step is S/4).
func (g *tpchGen) partSupplier(partkey, i int) int {
	s := g.supps
	step := s/4 + (partkey-1)/s
	seen := map[int]bool{}
	for j := range 4 {
		seen[j*step%s] = true
	}
	if len(seen) < 4 {
		step = max(1, s/4)
	}
	return (partkey+i*step)%s + 1
}

// inserts writes rows into table as INSERTs of g.batch rows each.
func (g *tpchGen) inserts(table string, n int, row func(i int) string) []string {
	var out []string
	var b strings.Builder
	for i := 1; i <= n; i++ {
		if b.Len() == 0 {
			b.WriteString("INSERT INTO " + table + " VALUES ")
		} else {
			b.WriteString(", ")
		}
		b.WriteString("(" + row(i) + ")")
		if i%g.batch == 0 || i == n {
			out = append(out, b.String())
			b.Reset()
		}
	}
	return out
}

// data is every table's rows.
func (g *tpchGen) data() []string {
	var out []string
	out = append(out, g.inserts("region", len(tpchRegions), func(i int) string {
		return fmt.Sprintf("%d, %s, %s", i-1, quote(tpchRegions[i-1]), quote(g.text(4, 12, 152)))
	})...)
	out = append(out, g.inserts("nation", len(tpchNations), func(i int) string {
		n := tpchNations[i-1]
		return fmt.Sprintf("%d, %s, %d, %s", i-1, quote(n.name), n.region, quote(g.text(4, 12, 152)))
	})...)
	out = append(out, g.inserts("supplier", g.supps, func(i int) string {
		nation := g.r.IntN(25)
		comment := g.text(4, 12, 101)
		// About 5 in 10,000 suppliers have complaints and as many
		// recommendations (clause 4.2.3), which Q16 reads.
		switch g.r.IntN(2000) {
		case 0:
			comment = "sly Customer " + g.text(1, 3, 40) + " Complaints " + g.text(1, 2, 30)
		case 1:
			comment = "even Customer " + g.text(1, 3, 40) + " Recommends " + g.text(1, 2, 30)
		}
		return fmt.Sprintf("%d, %s, %s, %d, %s, %s, %s", i, quote(fmt.Sprintf("Supplier#%09d", i)), quote(g.text(1, 3, 40)),
			nation, quote(g.phone(nation)), money(int64(g.between(-99999, 999999))), quote(comment))
	})...)
	out = append(out, g.inserts("part", g.parts, func(i int) string {
		colors := make([]string, 5)
		for c := range colors {
			colors[c] = tpchColors[g.r.IntN(len(tpchColors))]
		}
		m := g.between(1, 5)
		return fmt.Sprintf("%d, %s, %s, %s, %s, %d, %s, %s, %s", i, quote(strings.Join(colors, " ")),
			quote(fmt.Sprintf("Manufacturer#%d", m)), quote(fmt.Sprintf("Brand#%d%d", m, g.between(1, 5))),
			quote(tpchTypes1[g.r.IntN(6)]+" "+tpchTypes2[g.r.IntN(5)]+" "+tpchTypes3[g.r.IntN(5)]), g.between(1, 50),
			quote(tpchContainer1[g.r.IntN(5)]+" "+tpchContainer2[g.r.IntN(8)]), money(retailPrice(i)), quote(g.text(1, 4, 23)))
	})...)
	out = append(out, g.inserts("partsupp", 4*g.parts, func(i int) string {
		part, k := (i-1)/4+1, (i-1)%4
		return fmt.Sprintf("%d, %d, %d, %s, %s", part, g.partSupplier(part, k), g.between(1, 9999),
			money(int64(g.between(100, 100000))), quote(g.text(5, 20, 199)))
	})...)
	out = append(out, g.inserts("customer", g.custs, func(i int) string {
		nation := g.r.IntN(25)
		return fmt.Sprintf("%d, %s, %s, %d, %s, %s, %s, %s", i, quote(fmt.Sprintf("Customer#%09d", i)), quote(g.text(1, 3, 40)),
			nation, quote(g.phone(nation)), money(int64(g.between(-99999, 999999))), quote(tpchSegments[g.r.IntN(5)]),
			quote(g.text(4, 12, 117)))
	})...)
	orders, lines := g.ordersAndLines()
	return append(append(out, orders...), lines...)
}

// ordersAndLines writes orders (keys sparse: the first 8 of every 32)
// and their 1 to 7 lineitems each, with the order's status and total
// price derived from its lines (clause 4.2.3).
func (g *tpchGen) ordersAndLines() (orders, lines []string) {
	var orderRows, lineRows []string
	flush := func(table string, rows *[]string, out *[]string, force bool) {
		if len(*rows) >= g.batch || force && len(*rows) > 0 {
			*out = append(*out, "INSERT INTO "+table+" VALUES ("+strings.Join(*rows, "), (")+")")
			*rows = (*rows)[:0]
		}
	}
	for i := 0; i < g.ord; i++ {
		key := i/8*32 + i%8 + 1
		cust := g.between(1, g.custs)
		for g.custs > 2 && cust%3 == 0 {
			// A third of the customers place no orders.
			cust = g.between(1, g.custs)
		}
		date := tpchStart.AddDate(0, 0, g.r.IntN(tpchOrderDays+1))
		var total int64
		open, shipped := 0, 0
		n := g.between(1, 7)
		for ln := 1; ln <= n; ln++ {
			part := g.between(1, g.parts)
			supp := g.partSupplier(part, g.r.IntN(4))
			qty := int64(g.between(1, 50))
			price := qty * retailPrice(part)
			disc, tax := int64(g.between(0, 10)), int64(g.between(0, 8))
			ship := date.AddDate(0, 0, g.between(1, 121))
			commit := date.AddDate(0, 0, g.between(30, 90))
			receipt := ship.AddDate(0, 0, g.between(1, 30))
			flag := "N"
			if !receipt.After(tpchCurrent) {
				flag = []string{"R", "A"}[g.r.IntN(2)]
			}
			status := "F"
			if ship.After(tpchCurrent) {
				status, open = "O", open+1
			} else {
				shipped++
			}
			// price × (1 + tax) × (1 − discount), in cents, rounded.
			total += (price*(100+tax)*(100-disc) + 5000) / 10000
			lineRows = append(lineRows, fmt.Sprintf("%d, %d, %d, %d, %d, %s, %s, %s, '%s', '%s', %s, %s, %s, %s, %s, %s",
				key, part, supp, ln, qty, money(price), money(disc), money(tax), flag, status, day(ship), day(commit), day(receipt),
				quote(tpchInstructs[g.r.IntN(4)]), quote(tpchModes[g.r.IntN(7)]), quote(g.text(2, 6, 44))))
			flush("lineitem", &lineRows, &lines, false)
		}
		status := "P"
		switch {
		case open == 0:
			status = "F"
		case shipped == 0:
			status = "O"
		}
		orderRows = append(orderRows, fmt.Sprintf("%d, %d, '%s', %s, %s, %s, %s, 0, %s", key, cust, status, money(total), day(date),
			quote(tpchPriorities[g.r.IntN(5)]), quote(fmt.Sprintf("Clerk#%09d", g.between(1, max(1, g.supps/10)))), quote(g.text(3, 10, 79))))
		flush("orders", &orderRows, &orders, false)
	}
	flush("lineitem", &lineRows, &lines, true)
	flush("orders", &orderRows, &orders, true)
	return orders, lines
}
