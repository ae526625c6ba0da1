package engine

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tesseradb/tessera/pgerr"
)

// rows builds a Source of text rows; "NULL" is NULL.
func rows(rs ...string) *Source {
	var msgs [][]byte
	for _, r := range rs {
		var values [][]byte
		for _, v := range strings.Split(r, ",") {
			if v == "NULL" {
				values = append(values, nil)
			} else {
				values = append(values, []byte(v))
			}
		}
		msgs = append(msgs, encodeDataRow(values))
	}
	return NewSource(msgs)
}

func text(int) Format { return 0 }

func collect(t *testing.T, op Operator) []string {
	t.Helper()
	var out []string
	if err := Drain(op, func(r Row) {
		var vs []string
		for _, v := range r.Values {
			if v == nil {
				vs = append(vs, "NULL")
			} else {
				vs = append(vs, string(v))
			}
		}
		out = append(out, strings.Join(vs, ","))
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestMergeOrdersByEveryKeyWithNulls(t *testing.T) {
	// Sorted by $1 DESC (NULLs first), then $2 ASC (NULLs last).
	keys := []SortKey{{Column: 0, Type: Int, Desc: true, NullsFirst: true}, {Column: 1, Type: Int}}
	a := rows("NULL,1", "5,2", "5,NULL", "1,0")
	b := rows("NULL,0", "7,1", "5,1", "-3,9")
	c := rows()
	got := strings.Join(collect(t, NewMerge([]Operator{a, b, c}, keys, text)), " ")
	want := "NULL,0 NULL,1 7,1 5,1 5,2 5,NULL 1,0 -3,9"
	if got != want {
		t.Fatalf("merged %s, want %s", got, want)
	}
}

func TestLimitOffset(t *testing.T) {
	got := strings.Join(collect(t, NewLimit(rows("1", "2", "3", "4"), 1, 2)), " ")
	if got != "2 3" {
		t.Fatalf("got %s", got)
	}
	if got := collect(t, NewLimit(rows("1", "2"), 5, -1)); len(got) != 0 {
		t.Fatalf("got %v", got)
	}
}

func TestAggregateGroupsAndFinalizes(t *testing.T) {
	cols := []AggColumn{{Func: GroupKey}, {Func: SumCounts}, {Func: SumInt8}, {Func: Min, Type: Int}, {Func: Max, Type: Int}, {Func: BoolAnd}, {Func: BoolOr}, {Func: SumNumeric}}
	in := NewConcat(
		rows("a,2,10,-5,3,t,f,1.5", "NULL,1,NULL,NULL,NULL,NULL,NULL,NULL"),
		rows("a,3,-4,2,40,f,f,2.25", "NULL,0,7,1,1,t,t,100"),
	)
	got := strings.Join(collect(t, NewAggregate(in, cols, false, text)), " ")
	want := "a,5,6,-5,40,f,f,3.75 NULL,1,7,1,1,t,t,100"
	if got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
}

func TestScalarAggregateOfNothingAnswersOneRow(t *testing.T) {
	cols := []AggColumn{{Func: SumCounts}, {Func: SumInt8}, {Func: Max, Type: Int}}
	got := collect(t, NewAggregate(NewConcat(), cols, true, text))
	if len(got) != 1 || got[0] != "0,NULL,NULL" {
		t.Fatalf("got %v", got)
	}
}

func TestSumInt8OverflowIs22003(t *testing.T) {
	op := NewAggregate(rows("9223372036854775800", "8"), []AggColumn{{Func: SumInt8}}, true, text)
	_, _, err := op.Next()
	if pgerr.Code(err) != pgerr.NumericValueOutOfRange {
		t.Fatalf("got %v", err)
	}
}

func TestSumNumericSpecialValues(t *testing.T) {
	for in, want := range map[string]string{"1,NaN": "NaN", "Infinity,2": "Infinity", "Infinity,-Infinity": "NaN", "-Infinity,0.10": "-Infinity", "0.10,-0.1": "0.00"} {
		parts := strings.Split(in, ",")
		got := collect(t, NewAggregate(rows(parts...), []AggColumn{{Func: SumNumeric}}, true, text))
		if got[0] != want {
			t.Errorf("sum of %s = %s, want %s", in, got[0], want)
		}
	}
}

func TestSortIsStableAndBinary(t *testing.T) {
	bin := func(int) Format { return 1 }
	i4 := func(n int32) []byte { return []byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)} }
	src := NewSource([][]byte{encodeDataRow([][]byte{i4(3), []byte("x")}), encodeDataRow([][]byte{i4(-1), []byte("y")}), encodeDataRow([][]byte{i4(3), []byte("z")})})
	var got []string
	Drain(NewSort(src, []SortKey{{Column: 0, Type: Int, Desc: true}}, bin), func(r Row) { got = append(got, string(r.Values[1])) })
	if strings.Join(got, "") != "xzy" {
		t.Fatalf("got %v", got)
	}
}

func TestFilterDropsNullsAndFailures(t *testing.T) {
	conds := []Condition{{Column: 0, Op: ">", Value: 2}, {Column: 1, Op: "<>", Value: 0}}
	got := strings.Join(collect(t, NewFilter(rows("3,1", "2,1", "NULL,1", "5,0", "9,NULL", "7,-1"), conds, text)), " ")
	if got != "3,1 7,-1" {
		t.Fatalf("got %s", got)
	}
}

// TestNumericSendAsPostgres: the binary numerics follow numeric_send
// (base-10000 digits aligned at the point, no leading or trailing zero
// digits, weight 0 and a positive sign for zero); the differential
// harness compares them with Postgres's own bytes.
func TestNumericSendAsPostgres(t *testing.T) {
	for text, want := range map[string]string{
		"7.00":       "0001 0000 0000 0002 0007",
		"0.00":       "0000 0000 0000 0002",
		"10000":      "0001 0001 0000 0000 0001",
		"-123456.78": "0003 0001 4000 0002 000c 0d80 1e78",
		"0.0001":     "0001 ffff 0000 0004 0001",
		"NaN":        "0000 0000 c000 0000",
	} {
		got, err := numericSend(text)
		if err != nil {
			t.Fatal(err)
		}
		var hex []string
		for i := 0; i+1 < len(got); i += 2 {
			hex = append(hex, fmt.Sprintf("%02x%02x", got[i], got[i+1]))
		}
		if g := strings.Join(hex, " "); g != want {
			t.Errorf("%s: got %s, want %s", text, g, want)
		}
	}
}

// An empty string is a value, not NULL: min, max and any of ” are ”.
func TestAggregateKeepsEmptyValues(t *testing.T) {
	cols := []AggColumn{{Func: GroupKey}, {Func: Min, Type: Bytes}, {Func: Max, Type: Bytes}, {Func: Any}}
	in := NewConcat(rows("k,,,"), rows("k,,,"), rows("NULL,NULL,NULL,NULL"))
	op := NewAggregate(in, cols, false, text)
	var nulls []int
	if err := Drain(op, func(r Row) {
		for i, v := range r.Values {
			if v == nil {
				nulls = append(nulls, i)
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	// Only the second group (all NULL) has NULLs.
	if fmt.Sprint(nulls) != "[0 1 2 3]" {
		t.Fatalf("NULL columns %v, want only the NULL group's [0 1 2 3]", nulls)
	}
}
