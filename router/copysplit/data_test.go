package copysplit_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"math/big"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// keyKind is a shard-key type with a generator of its values: the value
// pgx sends in binary and its text form.
type keyKind struct {
	table, sqlType string
	gen            func(i int) (any, string)
}

var keyKinds = []keyKind{
	{"k_int8", "bigint", func(i int) (any, string) { v := int64(i)*7919 - 1_000_000; return v, strconv.FormatInt(v, 10) }},
	{"k_int4", "integer", func(i int) (any, string) { v := int32(i*31 - 5000); return v, strconv.Itoa(int(v)) }},
	{"k_int2", "smallint", func(i int) (any, string) { v := int16(i%2000 - 1000); return v, strconv.Itoa(int(v)) }},
	{"k_text", "text", textKey},
	{"k_varchar", "varchar(40)", textKey},
	{"k_bpchar", "char(12)", func(i int) (any, string) { v := fmt.Sprintf("c%d", i); return v, v }},
	{"k_uuid", "uuid", func(i int) (any, string) {
		var u [16]byte
		for j := range u {
			u[j] = byte(i*(j+7) + j)
		}
		h := hex.EncodeToString(u[:])
		return u, h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
	}},
	{"k_numeric", "numeric", func(i int) (any, string) {
		v := int64(i) * 137
		return pgtype.Numeric{Int: big.NewInt(v), Exp: -2, Valid: true}, fmt.Sprintf("%d.%02d", v/100, v%100)
	}},
	{"k_date", "date", func(i int) (any, string) {
		d := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC).AddDate(0, 0, i*3)
		return d, d.Format("2006-01-02")
	}},
	{"k_timestamptz", "timestamptz", func(i int) (any, string) {
		ts := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(i)*3607*time.Second + time.Duration(i%1000)*time.Microsecond)
		return ts, ts.Format("2006-01-02 15:04:05.000000-07")
	}},
	{"k_bytea", "bytea", func(i int) (any, string) {
		v := []byte{byte(i), byte(i >> 8), 0, '\\'}
		return v, `\x` + hex.EncodeToString(v)
	}},
}

func textKey(i int) (any, string) {
	var v string
	switch i % 7 {
	case 0:
		v = fmt.Sprintf("tab\tk%d", i)
	case 1:
		v = fmt.Sprintf("nl\nk%d\r", i)
	case 2:
		v = fmt.Sprintf(`q"k,%d`, i)
	case 3:
		v = fmt.Sprintf(`bs\k%d`, i)
	case 4:
		v = fmt.Sprintf("ü✓日本k%d", i)
	case 5:
		v = fmt.Sprintf(`\.%d`, i)
	default:
		v = fmt.Sprintf("k%d", i)
	}
	return v, v
}

// row is one generated row: k, v text, n bigint, b bytea; nil is NULL.
type row struct {
	key     any
	keyText string
	v       *string
	n       *int64
	b       []byte
}

const columnsDDL = "k %s, v text, n bigint, b bytea"

var columnNames = []string{"k", "v", "n", "b"}

func genRow(kind keyKind, i int) row {
	r := row{}
	r.key, r.keyText = kind.gen(i)
	var v string
	switch i % 9 {
	case 0:
	case 1:
		v = ""
	case 2:
		v = `a,b"c\d;e`
	case 3:
		v = "line1\nline2\r\nline3\r"
	case 4:
		v = "tab\there\\N"
	case 5:
		v = "Grüße ✓ 日本語 🙂"
	case 6:
		v = `\N`
	case 7:
		if i%97 == 7 && i < 5000 {
			v = strings.Repeat("large value ", 20000)
		} else {
			v = fmt.Sprintf("plain %d", i)
		}
	default:
		v = "\\.\n\\."
	}
	if i%9 != 0 {
		r.v = &v
	}
	if i%5 != 0 {
		n := int64(i) * int64(i)
		r.n = &n
	}
	if i%3 != 0 {
		r.b = []byte{0, byte(i), 0xff, '\\'}
	}
	return r
}

// textField renders a value for COPY's text format.
func textField(s *string) string {
	if s == nil {
		return `\N`
	}
	return textEscaper.Replace(*s)
}

var textEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, "\r", `\r`, "\t", `\t`)

// csvField renders a value for CSV, quoting when it must (and every
// third value besides).
func csvField(s *string, i int) string {
	if s == nil {
		return ""
	}
	if *s == "" || i%3 == 0 || strings.ContainsAny(*s, ",\"\n\r") || strings.HasPrefix(*s, `\.`) {
		return `"` + strings.ReplaceAll(*s, `"`, `""`) + `"`
	}
	return *s
}

func (r row) fields() []*string {
	k := r.keyText
	out := []*string{&k, r.v, nil, nil}
	if r.n != nil {
		n := strconv.FormatInt(*r.n, 10)
		out[2] = &n
	}
	if r.b != nil {
		b := `\x` + hex.EncodeToString(r.b)
		out[3] = &b
	}
	return out
}

func (r row) text() string {
	f := r.fields()
	parts := make([]string, len(f))
	for i, v := range f {
		parts[i] = textField(v)
	}
	return strings.Join(parts, "\t") + "\n"
}

func (r row) csv(i int) string {
	f := r.fields()
	parts := make([]string, len(f))
	for j, v := range f {
		parts[j] = csvField(v, i+j)
	}
	return strings.Join(parts, ",") + "\n"
}

func (r row) values() []any {
	out := []any{r.key, nil, nil, nil}
	if r.v != nil {
		out[1] = *r.v
	}
	if r.n != nil {
		out[2] = *r.n
	}
	if r.b != nil {
		out[3] = r.b
	}
	return out
}

// copyFormats are the three ways rows are sent.
var copyFormats = []string{"text", "csv", "binary"}

// copyRows sends n generated rows (from first) of kind into table through
// conn in format, streaming: it returns the command tag's row count.
func copyRows(ctx context.Context, conn *pgx.Conn, table string, kind keyKind, format string, first, n int) (int64, error) {
	if format == "binary" {
		i := first
		return conn.CopyFrom(ctx, pgx.Identifier{table}, columnNames, pgx.CopyFromFunc(func() ([]any, error) {
			if i >= first+n {
				return nil, nil
			}
			i++
			return genRow(kind, i-1).values(), nil
		}))
	}
	sql := "COPY " + table + " (k, v, n, b) FROM STDIN"
	if format == "csv" {
		sql += " WITH (FORMAT csv, HEADER true)"
	}
	pr, pw := io.Pipe()
	go func() {
		var buf bytes.Buffer
		if format == "csv" {
			buf.WriteString("k,v,n,b\n")
		}
		for i := first; i < first+n; i++ {
			r := genRow(kind, i)
			if format == "csv" {
				buf.WriteString(r.csv(i))
			} else {
				buf.WriteString(r.text())
			}
			if buf.Len() > 64<<10 {
				if _, err := pw.Write(buf.Bytes()); err != nil {
					return
				}
				buf.Reset()
			}
		}
		pw.Write(buf.Bytes())
		pw.Close()
	}()
	tag, err := conn.PgConn().CopyFrom(ctx, pr, sql)
	pr.Close()
	return tag.RowsAffected(), err
}

// copyText sends a text stream as it is.
func copyText(ctx context.Context, conn *pgx.Conn, sql, data string) (int64, error) {
	tag, err := conn.PgConn().CopyFrom(ctx, strings.NewReader(data), sql)
	return tag.RowsAffected(), err
}
