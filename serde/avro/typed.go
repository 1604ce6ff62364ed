package avro

import (
	"fmt"
	"math/big"
	"reflect"
	"strings"
	"time"
)

// mapping converts between Go values of one type and goavro's native form
// for one schema, compiled once per (type, schema).
type mapping struct {
	enc func(v reflect.Value) (any, error)
	dec func(native any, v reflect.Value) error
}

type mapKey struct {
	t reflect.Type
	s *schema
}

type mapBuilder struct {
	memo map[mapKey]*mapping
}

var (
	timeType     = reflect.TypeFor[time.Time]()
	durationType = reflect.TypeFor[time.Duration]()
	ratPtrType   = reflect.TypeFor[*big.Rat]()
)

func buildMapping(t reflect.Type, s *schema) (*mapping, error) {
	b := &mapBuilder{memo: map[mapKey]*mapping{}}
	return b.build(t, s)
}

func (b *mapBuilder) build(t reflect.Type, s *schema) (*mapping, error) {
	key := mapKey{t, s}
	if m, ok := b.memo[key]; ok {
		return m, nil // recursive types: filled in below before use
	}
	m := &mapping{}
	b.memo[key] = m
	if err := b.fill(m, t, s); err != nil {
		delete(b.memo, key)
		return nil, err
	}
	return m, nil
}

func mismatch(t reflect.Type, s *schema) error {
	return fmt.Errorf("avro: Go type %s cannot hold Avro %s", t, describe(s))
}

func (b *mapBuilder) fill(m *mapping, t reflect.Type, s *schema) error {
	if t.Kind() == reflect.Interface && t.NumMethod() == 0 {
		m.enc = func(v reflect.Value) (any, error) { return encodeAny(s, v.Interface()) }
		m.dec = func(n any, v reflect.Value) error {
			x, err := decodeAny(s, n)
			if err != nil {
				return err
			}
			if x == nil {
				v.SetZero()
			} else {
				v.Set(reflect.ValueOf(x))
			}
			return nil
		}
		return nil
	}
	switch s.kind {
	case kUnion:
		return b.union(m, t, s)
	case kNull:
		m.enc = func(reflect.Value) (any, error) { return nil, nil }
		m.dec = func(_ any, v reflect.Value) error { v.SetZero(); return nil }
		return nil
	case kBoolean:
		if t.Kind() != reflect.Bool {
			return mismatch(t, s)
		}
		m.enc = func(v reflect.Value) (any, error) { return v.Bool(), nil }
		m.dec = func(n any, v reflect.Value) error { v.SetBool(n.(bool)); return nil }
		return nil
	case kInt, kLong:
		return b.integer(m, t, s)
	case kFloat, kDouble:
		if t.Kind() != reflect.Float32 && t.Kind() != reflect.Float64 {
			return mismatch(t, s)
		}
		m.enc = func(v reflect.Value) (any, error) {
			if s.kind == kFloat {
				return float32(v.Float()), nil
			}
			return v.Float(), nil
		}
		m.dec = func(n any, v reflect.Value) error {
			switch x := n.(type) {
			case float32:
				v.SetFloat(float64(x))
			case float64:
				v.SetFloat(x)
			}
			return nil
		}
		return nil
	case kString:
		if t.Kind() != reflect.String {
			return mismatch(t, s)
		}
		m.enc = func(v reflect.Value) (any, error) { return v.String(), nil }
		m.dec = func(n any, v reflect.Value) error { v.SetString(n.(string)); return nil }
		return nil
	case kEnum:
		if t.Kind() != reflect.String {
			return mismatch(t, s)
		}
		m.enc = func(v reflect.Value) (any, error) { return v.String(), nil }
		m.dec = func(n any, v reflect.Value) error { v.SetString(n.(string)); return nil }
		return nil
	case kBytes, kFixed:
		return b.bytes(m, t, s)
	case kArray:
		if t.Kind() != reflect.Slice {
			return mismatch(t, s)
		}
		em, err := b.build(t.Elem(), s.items)
		if err != nil {
			return err
		}
		m.enc = func(v reflect.Value) (any, error) {
			out := make([]any, v.Len())
			for i := range out {
				x, err := em.enc(v.Index(i))
				if err != nil {
					return nil, err
				}
				out[i] = x
			}
			return out, nil
		}
		m.dec = func(n any, v reflect.Value) error {
			in := n.([]any)
			sl := reflect.MakeSlice(t, len(in), len(in))
			for i, x := range in {
				if err := em.dec(x, sl.Index(i)); err != nil {
					return err
				}
			}
			v.Set(sl)
			return nil
		}
		return nil
	case kMap:
		if t.Kind() != reflect.Map || t.Key().Kind() != reflect.String {
			return mismatch(t, s)
		}
		vm, err := b.build(t.Elem(), s.values)
		if err != nil {
			return err
		}
		m.enc = func(v reflect.Value) (any, error) {
			out := make(map[string]any, v.Len())
			it := v.MapRange()
			for it.Next() {
				x, err := vm.enc(it.Value())
				if err != nil {
					return nil, err
				}
				out[it.Key().String()] = x
			}
			return out, nil
		}
		m.dec = func(n any, v reflect.Value) error {
			in := n.(map[string]any)
			mv := reflect.MakeMapWithSize(t, len(in))
			for k, x := range in {
				ev := reflect.New(t.Elem()).Elem()
				if err := vm.dec(x, ev); err != nil {
					return err
				}
				mv.SetMapIndex(reflect.ValueOf(k).Convert(t.Key()), ev)
			}
			v.Set(mv)
			return nil
		}
		return nil
	case kRecord:
		if t.Kind() == reflect.Map && t.Key().Kind() == reflect.String && t.Elem().Kind() == reflect.Interface {
			m.enc = func(v reflect.Value) (any, error) { return encodeAny(s, v.Interface()) }
			m.dec = func(n any, v reflect.Value) error {
				x, err := decodeAny(s, n)
				if err != nil {
					return err
				}
				v.Set(reflect.ValueOf(x).Convert(t))
				return nil
			}
			return nil
		}
		if t.Kind() != reflect.Struct {
			return mismatch(t, s)
		}
		return b.record(m, t, s)
	}
	return mismatch(t, s)
}

func (b *mapBuilder) integer(m *mapping, t reflect.Type, s *schema) error {
	switch {
	case t == timeType && (s.logical == "timestamp-millis" || s.logical == "timestamp-micros" || s.logical == "date"):
		m.enc = func(v reflect.Value) (any, error) { return v.Interface().(time.Time), nil }
		m.dec = func(n any, v reflect.Value) error {
			if tm, ok := n.(time.Time); ok {
				v.Set(reflect.ValueOf(tm))
			}
			return nil
		}
		return nil
	case t == durationType && (s.logical == "time-millis" || s.logical == "time-micros"):
		m.enc = func(v reflect.Value) (any, error) { return time.Duration(v.Int()), nil }
		m.dec = func(n any, v reflect.Value) error {
			if d, ok := n.(time.Duration); ok {
				v.SetInt(int64(d))
			}
			return nil
		}
		return nil
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
	default:
		return mismatch(t, s)
	}
	m.enc = func(v reflect.Value) (any, error) {
		if s.kind == kInt {
			return int32(v.Int()), nil
		}
		return v.Int(), nil
	}
	m.dec = func(n any, v reflect.Value) error {
		switch x := n.(type) {
		case int32:
			v.SetInt(int64(x))
		case int64:
			v.SetInt(x)
		case time.Time:
			v.SetInt(x.UnixMilli())
		case time.Duration:
			v.SetInt(int64(x))
		}
		return nil
	}
	return nil
}

func (b *mapBuilder) bytes(m *mapping, t reflect.Type, s *schema) error {
	if s.logical == "decimal" && t == ratPtrType {
		m.enc = func(v reflect.Value) (any, error) {
			if v.IsNil() {
				return new(big.Rat), nil
			}
			return v.Interface().(*big.Rat), nil
		}
		m.dec = func(n any, v reflect.Value) error {
			if r, ok := n.(*big.Rat); ok {
				v.Set(reflect.ValueOf(r))
			}
			return nil
		}
		return nil
	}
	switch {
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8:
		m.enc = func(v reflect.Value) (any, error) { return v.Bytes(), nil }
		m.dec = func(n any, v reflect.Value) error {
			v.SetBytes(append([]byte(nil), n.([]byte)...))
			return nil
		}
		return nil
	case t.Kind() == reflect.Array && t.Elem().Kind() == reflect.Uint8 && s.kind == kFixed && t.Len() == s.size:
		m.enc = func(v reflect.Value) (any, error) {
			out := make([]byte, v.Len())
			reflect.Copy(reflect.ValueOf(out), v)
			return out, nil
		}
		m.dec = func(n any, v reflect.Value) error {
			reflect.Copy(v, reflect.ValueOf(n.([]byte)))
			return nil
		}
		return nil
	}
	return mismatch(t, s)
}

// union: a pointer (or any nilable type) for a union of null and one type;
// a plain value for a union that never is null in Go terms; anything else
// needs an interface type.
func (b *mapBuilder) union(m *mapping, t reflect.Type, s *schema) error {
	var nullIdx = -1
	var others []*schema
	for i, br := range s.branches {
		if br.kind == kNull {
			nullIdx = i
		} else {
			others = append(others, br)
		}
	}
	if len(others) != 1 {
		return fmt.Errorf("avro: union of %d types needs an interface Go type (any), not %s", len(others), t)
	}
	inner := others[0]
	name := inner.unionName()
	if t.Kind() == reflect.Pointer && nullIdx >= 0 {
		em, err := b.build(t.Elem(), inner)
		if err != nil {
			return err
		}
		m.enc = func(v reflect.Value) (any, error) {
			if v.IsNil() {
				return nil, nil
			}
			x, err := em.enc(v.Elem())
			if err != nil {
				return nil, err
			}
			return map[string]any{name: x}, nil
		}
		m.dec = func(n any, v reflect.Value) error {
			x, ok := unwrap(n)
			if !ok {
				v.SetZero()
				return nil
			}
			p := reflect.New(t.Elem())
			if err := em.dec(x, p.Elem()); err != nil {
				return err
			}
			v.Set(p)
			return nil
		}
		return nil
	}
	em, err := b.build(t, inner)
	if err != nil {
		return err
	}
	m.enc = func(v reflect.Value) (any, error) {
		if nullIdx >= 0 && (v.Kind() == reflect.Slice || v.Kind() == reflect.Map) && v.IsNil() {
			return nil, nil
		}
		x, err := em.enc(v)
		if err != nil {
			return nil, err
		}
		return map[string]any{name: x}, nil
	}
	m.dec = func(n any, v reflect.Value) error {
		x, ok := unwrap(n)
		if !ok {
			v.SetZero()
			return nil
		}
		return em.dec(x, v)
	}
	return nil
}

// unwrap returns the value inside a goavro union datum; false for null.
func unwrap(n any) (any, bool) {
	if n == nil {
		return nil, false
	}
	if m, ok := n.(map[string]any); ok && len(m) == 1 {
		for _, v := range m {
			return v, true
		}
	}
	return n, true
}

func (b *mapBuilder) record(m *mapping, t reflect.Type, s *schema) error {
	type fieldMap struct {
		name  string
		index []int
		m     *mapping
		deflt any // used when the struct has no field for it
		has   bool
	}
	byName := map[string][]int{}
	for _, sf := range reflect.VisibleFields(t) {
		if !sf.IsExported() || sf.Anonymous {
			continue
		}
		tag := sf.Tag.Get("avro")
		if tag == "-" {
			continue
		}
		if tag != "" {
			byName[tag] = sf.Index
			continue
		}
		if _, taken := byName[sf.Name]; !taken {
			byName[strings.ToLower(sf.Name)] = sf.Index
		}
	}
	var fields []fieldMap
	for _, f := range s.fields {
		idx, ok := byName[f.name]
		if !ok {
			idx, ok = byName[strings.ToLower(f.name)]
		}
		if !ok {
			if !f.hasDefault {
				return fmt.Errorf("avro: record %s field %q has no default and %s has no field for it (tag a field `avro:%q`)", s.name, f.name, t, f.name)
			}
			d, err := defaultNative(f.typ, f.dflt)
			if err != nil {
				return err
			}
			fields = append(fields, fieldMap{name: f.name, deflt: d})
			continue
		}
		fm, err := b.build(t.FieldByIndex(idx).Type, f.typ)
		if err != nil {
			return fmt.Errorf("avro: record %s field %q: %w", s.name, f.name, err)
		}
		fields = append(fields, fieldMap{name: f.name, index: idx, m: fm, has: true})
	}
	m.enc = func(v reflect.Value) (any, error) {
		out := make(map[string]any, len(fields))
		for _, f := range fields {
			if !f.has {
				out[f.name] = f.deflt
				continue
			}
			x, err := f.m.enc(v.FieldByIndex(f.index))
			if err != nil {
				return nil, fmt.Errorf("field %s: %w", f.name, err)
			}
			out[f.name] = x
		}
		return out, nil
	}
	m.dec = func(n any, v reflect.Value) error {
		in, ok := n.(map[string]any)
		if !ok {
			return fmt.Errorf("record %s: got %T", s.name, n)
		}
		for _, f := range fields {
			if !f.has {
				continue
			}
			if err := f.m.dec(in[f.name], v.FieldByIndex(f.index)); err != nil {
				return fmt.Errorf("field %s: %w", f.name, err)
			}
		}
		return nil
	}
	return nil
}

// encodeAny turns a generic Go value (maps, slices, plain values; union
// values may be plain or goavro-wrapped) into goavro's native form.
func encodeAny(s *schema, v any) (any, error) {
	switch s.kind {
	case kNull:
		return nil, nil
	case kUnion:
		if v == nil {
			for _, br := range s.branches {
				if br.kind == kNull {
					return nil, nil
				}
			}
			return nil, fmt.Errorf("avro: nil for a union without null")
		}
		if m, ok := v.(map[string]any); ok && len(m) == 1 {
			for name, inner := range m {
				for _, br := range s.branches {
					if br.unionName() == name {
						x, err := encodeAny(br, inner)
						return map[string]any{name: x}, err
					}
				}
			}
		}
		for _, br := range s.branches {
			if br.kind != kNull && accepts(br, v) {
				x, err := encodeAny(br, v)
				if err != nil {
					return nil, err
				}
				return map[string]any{br.unionName(): x}, nil
			}
		}
		return nil, fmt.Errorf("avro: %T matches no branch of the union", v)
	case kRecord:
		m, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("avro: record %s needs map[string]any, got %T", s.name, v)
		}
		out := make(map[string]any, len(s.fields))
		for _, f := range s.fields {
			x, present := m[f.name]
			if !present {
				if !f.hasDefault {
					return nil, fmt.Errorf("avro: record %s: field %q missing", s.name, f.name)
				}
				d, err := defaultNative(f.typ, f.dflt)
				if err != nil {
					return nil, err
				}
				out[f.name] = d
				continue
			}
			enc, err := encodeAny(f.typ, x)
			if err != nil {
				return nil, fmt.Errorf("field %s: %w", f.name, err)
			}
			out[f.name] = enc
		}
		return out, nil
	case kArray:
		rv := reflect.ValueOf(v)
		if rv.Kind() != reflect.Slice {
			return nil, fmt.Errorf("avro: array needs a slice, got %T", v)
		}
		out := make([]any, rv.Len())
		for i := range out {
			x, err := encodeAny(s.items, rv.Index(i).Interface())
			if err != nil {
				return nil, err
			}
			out[i] = x
		}
		return out, nil
	case kMap:
		rv := reflect.ValueOf(v)
		if rv.Kind() != reflect.Map {
			return nil, fmt.Errorf("avro: map needs a map, got %T", v)
		}
		out := make(map[string]any, rv.Len())
		it := rv.MapRange()
		for it.Next() {
			x, err := encodeAny(s.values, it.Value().Interface())
			if err != nil {
				return nil, err
			}
			out[fmt.Sprint(it.Key().Interface())] = x
		}
		return out, nil
	case kInt:
		switch x := v.(type) {
		case int:
			return int32(x), nil
		case int64:
			return int32(x), nil
		}
	case kLong:
		switch x := v.(type) {
		case int:
			return int64(x), nil
		case int32:
			return int64(x), nil
		}
	case kFloat:
		if x, ok := v.(float64); ok {
			return float32(x), nil
		}
	case kDouble:
		switch x := v.(type) {
		case float32:
			return float64(x), nil
		case int:
			return float64(x), nil
		}
	}
	return v, nil
}

// accepts reports whether a plain Go value fits a union branch.
func accepts(s *schema, v any) bool {
	switch v.(type) {
	case bool:
		return s.kind == kBoolean
	case int, int32, int64:
		return s.kind == kInt || s.kind == kLong
	case float32, float64:
		return s.kind == kFloat || s.kind == kDouble
	case string:
		return s.kind == kString || s.kind == kEnum
	case []byte:
		return s.kind == kBytes || s.kind == kFixed
	case time.Time:
		return s.logical == "timestamp-millis" || s.logical == "timestamp-micros" || s.logical == "date"
	case map[string]any:
		return s.kind == kRecord || s.kind == kMap
	case []any:
		return s.kind == kArray
	}
	return false
}

// decodeAny turns goavro's native form into plain Go values: unions
// unwrapped, records as map[string]any.
func decodeAny(s *schema, n any) (any, error) {
	switch s.kind {
	case kUnion:
		if n == nil {
			return nil, nil
		}
		m, ok := n.(map[string]any)
		if !ok || len(m) != 1 {
			return n, nil
		}
		for name, inner := range m {
			for _, br := range s.branches {
				if br.unionName() == name {
					return decodeAny(br, inner)
				}
			}
		}
		return nil, nil
	case kRecord:
		in := n.(map[string]any)
		out := make(map[string]any, len(in))
		for _, f := range s.fields {
			x, err := decodeAny(f.typ, in[f.name])
			if err != nil {
				return nil, err
			}
			out[f.name] = x
		}
		return out, nil
	case kArray:
		in := n.([]any)
		out := make([]any, len(in))
		for i, x := range in {
			y, err := decodeAny(s.items, x)
			if err != nil {
				return nil, err
			}
			out[i] = y
		}
		return out, nil
	case kMap:
		in := n.(map[string]any)
		out := make(map[string]any, len(in))
		for k, x := range in {
			y, err := decodeAny(s.values, x)
			if err != nil {
				return nil, err
			}
			out[k] = y
		}
		return out, nil
	}
	return n, nil
}
