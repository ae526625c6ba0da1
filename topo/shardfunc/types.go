package shardfunc

import (
	"strings"

	"github.com/tesseradb/tessera/pgerr"
)

// ColumnType is the Postgres type of a shard-key column, as far as routing
// cares. Only types with a stable canonical encoding are listed; the zero
// value is not a valid type.
type ColumnType uint8

const (
	Int2 ColumnType = iota + 1
	Int4
	Int8
	Text
	Varchar
	Name
	Bpchar
	Bytea
	UUID
	Bool
	Date
	Timestamp
	Timestamptz
	Numeric
)

var typeNames = [...]string{
	Int2: "int2", Int4: "int4", Int8: "int8",
	Text: "text", Varchar: "varchar", Name: "name", Bpchar: "bpchar",
	Bytea: "bytea", UUID: "uuid", Bool: "bool",
	Date: "date", Timestamp: "timestamp", Timestamptz: "timestamptz",
	Numeric: "numeric",
}

// Postgres type OIDs (pg_type.oid) of the supported types.
var typeOIDs = [...]uint32{
	Int2: 21, Int4: 23, Int8: 20,
	Text: 25, Varchar: 1043, Name: 19, Bpchar: 1042,
	Bytea: 17, UUID: 2950, Bool: 16,
	Date: 1082, Timestamp: 1114, Timestamptz: 1184,
	Numeric: 1700,
}

func (t ColumnType) String() string {
	if int(t) < len(typeNames) && typeNames[t] != "" {
		return typeNames[t]
	}
	return "invalid"
}

// OID returns the Postgres type OID of t.
func (t ColumnType) OID() uint32 {
	if int(t) < len(typeOIDs) {
		return typeOIDs[t]
	}
	return 0
}

// IsInteger reports whether t is int2, int4 or int8, the only types the
// modulo and range functions take.
func (t ColumnType) IsInteger() bool { return t == Int2 || t == Int4 || t == Int8 }

// TypeForOID returns the ColumnType for a Postgres type OID.
func TypeForOID(oid uint32) (ColumnType, bool) {
	for t, o := range typeOIDs {
		if o == oid && o != 0 {
			return ColumnType(t), true
		}
	}
	return 0, false
}

var typeAliases = map[string]ColumnType{
	"int2": Int2, "smallint": Int2,
	"int4": Int4, "int": Int4, "integer": Int4,
	"int8": Int8, "bigint": Int8,
	"text":    Text,
	"varchar": Varchar, "character varying": Varchar,
	"name":   Name,
	"bpchar": Bpchar, "char": Bpchar, "character": Bpchar,
	"bytea": Bytea,
	"uuid":  UUID,
	"bool":  Bool, "boolean": Bool,
	"date":      Date,
	"timestamp": Timestamp, "timestamp without time zone": Timestamp,
	"timestamptz": Timestamptz, "timestamp with time zone": Timestamptz,
	"numeric": Numeric, "decimal": Numeric,
}

// unsupported names types that are refused on purpose, with the reason.
var unsupported = map[string]string{
	"float4":           "floating-point values have no exact canonical form",
	"float8":           "floating-point values have no exact canonical form",
	"real":             "floating-point values have no exact canonical form",
	"double precision": "floating-point values have no exact canonical form",
	"json":             "json values have no canonical form (key order and spacing vary)",
	"jsonb":            "jsonb values are not supported as shard keys",
}

// ParseColumnType resolves a Postgres type name (int8, bigint, character
// varying, timestamptz, ...) to a ColumnType. A type modifier such as
// varchar(20) or numeric(10,2) is ignored. Types that cannot be shard keys
// are refused with SQLSTATE 0A000 and the reason.
func ParseColumnType(name string) (ColumnType, error) {
	n := strings.ToLower(strings.TrimSpace(name))
	if strings.HasSuffix(n, "[]") || strings.HasPrefix(n, "_") {
		return 0, pgerr.New(pgerr.FeatureNotSupported, "type %q cannot be a shard key: arrays are not supported", name)
	}
	if i := strings.IndexByte(n, '('); i >= 0 {
		if j := strings.IndexByte(n[i:], ')'); j >= 0 {
			n = strings.TrimSpace(n[:i] + n[i+j+1:])
		}
	}
	n = strings.Join(strings.Fields(n), " ")
	if t, ok := typeAliases[n]; ok {
		return t, nil
	}
	if why, ok := unsupported[n]; ok {
		return 0, pgerr.New(pgerr.FeatureNotSupported, "type %q cannot be a shard key: %s", name, why)
	}
	return 0, pgerr.New(pgerr.FeatureNotSupported, "type %q cannot be a shard key: not supported", name)
}
