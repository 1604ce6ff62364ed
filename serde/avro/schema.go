package avro

import (
	"encoding/json"
	"fmt"
	"strings"
)

// kind is an Avro type.
type kind int

const (
	kNull kind = iota
	kBoolean
	kInt
	kLong
	kFloat
	kDouble
	kBytes
	kString
	kRecord
	kEnum
	kArray
	kMap
	kUnion
	kFixed
)

var primitiveKinds = map[string]kind{
	"null": kNull, "boolean": kBoolean, "int": kInt, "long": kLong, "float": kFloat,
	"double": kDouble, "bytes": kBytes, "string": kString,
}

func (k kind) String() string {
	return [...]string{"null", "boolean", "int", "long", "float", "double", "bytes", "string",
		"record", "enum", "array", "map", "union", "fixed"}[k]
}

// schema is a parsed Avro schema: what resolution and typed mapping need.
type schema struct {
	kind     kind
	logical  string // timestamp-millis, timestamp-micros, date, decimal, uuid, …
	name     string // full name of records, enums and fixed
	aliases  []string
	fields   []*field
	symbols  []string
	enumDflt string
	items    *schema // arrays
	values   *schema // maps
	branches []*schema
	size     int // fixed
}

type field struct {
	name       string
	aliases    []string
	typ        *schema
	dflt       any // JSON default, decoded
	hasDefault bool
}

// unionName is the name goavro uses for a union branch of this type: the
// full name for named types, the type (with logical type) otherwise.
func (s *schema) unionName() string {
	switch s.kind {
	case kRecord, kEnum, kFixed:
		return s.name
	case kBytes:
		if s.logical == "decimal" {
			return "bytes.decimal"
		}
	case kLong:
		switch s.logical {
		case "timestamp-millis", "timestamp-micros", "time-micros":
			return "long." + s.logical
		}
	case kInt:
		switch s.logical {
		case "date", "time-millis":
			return "int." + s.logical
		}
	}
	return s.kind.String()
}

// parseSchema parses the JSON text of an Avro schema.
func parseSchema(text string) (*schema, error) {
	var raw any
	if err := json.Unmarshal([]byte(text), &raw); err != nil {
		return nil, fmt.Errorf("avro: schema is not JSON: %w", err)
	}
	p := &parser{named: map[string]*schema{}}
	return p.parse(raw, "")
}

type parser struct {
	named map[string]*schema
}

func fullName(name, namespace string) string {
	if strings.Contains(name, ".") || namespace == "" {
		return name
	}
	return namespace + "." + name
}

func (p *parser) parse(raw any, ns string) (*schema, error) {
	switch v := raw.(type) {
	case string:
		if k, ok := primitiveKinds[v]; ok {
			return &schema{kind: k}, nil
		}
		if s, ok := p.named[fullName(v, ns)]; ok {
			return s, nil
		}
		if s, ok := p.named[v]; ok {
			return s, nil
		}
		return nil, fmt.Errorf("avro: unknown type %q", v)
	case []any:
		u := &schema{kind: kUnion}
		for _, b := range v {
			s, err := p.parse(b, ns)
			if err != nil {
				return nil, err
			}
			u.branches = append(u.branches, s)
		}
		return u, nil
	case map[string]any:
		return p.parseObject(v, ns)
	}
	return nil, fmt.Errorf("avro: bad schema element %v", raw)
}

func strs(v any) []string {
	arr, _ := v.([]any)
	out := make([]string, 0, len(arr))
	for _, a := range arr {
		if s, ok := a.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

func (p *parser) parseObject(m map[string]any, ns string) (*schema, error) {
	typ, _ := m["type"].(string)
	logical, _ := m["logicalType"].(string)
	if typ == "" {
		// {"type": {...}} or {"type": [...]}: a nested type.
		s, err := p.parse(m["type"], ns)
		if err != nil {
			return nil, err
		}
		return s, nil
	}
	if k, ok := primitiveKinds[typ]; ok {
		return &schema{kind: k, logical: logical}, nil
	}
	name, _ := m["name"].(string)
	if n, ok := m["namespace"].(string); ok {
		ns = n
	}
	full := fullName(name, ns)
	if i := strings.LastIndex(full, "."); i >= 0 {
		ns = full[:i]
	}
	switch typ {
	case "record", "error":
		s := &schema{kind: kRecord, name: full, aliases: strs(m["aliases"])}
		p.named[full] = s
		fields, _ := m["fields"].([]any)
		for _, f := range fields {
			fm, ok := f.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("avro: record %s has a bad field", full)
			}
			fname, _ := fm["name"].(string)
			ft, err := p.parse(fm["type"], ns)
			if err != nil {
				return nil, fmt.Errorf("avro: record %s field %s: %w", full, fname, err)
			}
			d, has := fm["default"]
			s.fields = append(s.fields, &field{name: fname, aliases: strs(fm["aliases"]), typ: ft, dflt: d, hasDefault: has})
		}
		return s, nil
	case "enum":
		s := &schema{kind: kEnum, name: full, symbols: strs(m["symbols"]), aliases: strs(m["aliases"])}
		s.enumDflt, _ = m["default"].(string)
		p.named[full] = s
		return s, nil
	case "fixed":
		size, _ := m["size"].(float64)
		s := &schema{kind: kFixed, name: full, size: int(size), logical: logical, aliases: strs(m["aliases"])}
		p.named[full] = s
		return s, nil
	case "array":
		items, err := p.parse(m["items"], ns)
		if err != nil {
			return nil, err
		}
		return &schema{kind: kArray, items: items}, nil
	case "map":
		values, err := p.parse(m["values"], ns)
		if err != nil {
			return nil, err
		}
		return &schema{kind: kMap, values: values}, nil
	}
	if s, ok := p.named[fullName(typ, ns)]; ok {
		return s, nil
	}
	return nil, fmt.Errorf("avro: unknown type %q", typ)
}
