package avro

import (
	"fmt"
	"math/big"
	"slices"
	"time"
)

// resolver turns a datum decoded with the writer's schema into the reader
// schema's form, following Avro schema resolution: fields matched by name
// (or reader alias), reader fields the writer lacks take their defaults,
// writer fields the reader lacks are dropped, numbers are promoted
// (int → long → float → double), string and bytes interchange, unions pick
// the first matching branch.
type resolver func(v any) (any, error)

type resolvePair struct{ w, r *schema }

type resolveBuilder struct {
	memo map[resolvePair]*resolver
}

func identity(v any) (any, error) { return v, nil }

// buildResolver compiles the resolution of writer schema w into reader
// schema r, or reports why data of w cannot be read as r.
func buildResolver(w, r *schema) (resolver, error) {
	b := &resolveBuilder{memo: map[resolvePair]*resolver{}}
	return b.build(w, r)
}

func (b *resolveBuilder) build(w, r *schema) (resolver, error) {
	key := resolvePair{w, r}
	if p, ok := b.memo[key]; ok {
		return func(v any) (any, error) { return (*p)(v) }, nil // recursive record
	}
	var res resolver
	b.memo[key] = &res
	built, err := b.buildNew(w, r)
	if err != nil {
		delete(b.memo, key)
		return nil, err
	}
	res = built
	return res, nil
}

func (b *resolveBuilder) buildNew(w, r *schema) (resolver, error) {
	if w.kind == kUnion {
		branches := map[string]resolver{}
		var errs []string
		for _, wb := range w.branches {
			rb, err := b.build(wb, r)
			if err != nil {
				errs = append(errs, err.Error())
				continue
			}
			branches[wb.unionName()] = rb
		}
		if len(branches) == 0 {
			return nil, fmt.Errorf("no branch of the writer's union can be read as %s: %v", r.kind, errs)
		}
		return func(v any) (any, error) {
			if v == nil {
				if f, ok := branches["null"]; ok {
					return f(nil)
				}
				return nil, fmt.Errorf("null cannot be read as %s", r.kind)
			}
			m, ok := v.(map[string]any)
			if !ok || len(m) != 1 {
				return nil, fmt.Errorf("union value %T is not a single-branch map", v)
			}
			for name, inner := range m {
				f, ok := branches[name]
				if !ok {
					return nil, fmt.Errorf("union branch %s cannot be read: the reader's schema has no matching type", name)
				}
				return f(inner)
			}
			return nil, nil
		}, nil
	}
	if r.kind == kUnion {
		for _, rb := range r.branches {
			if !matches(w, rb) {
				continue
			}
			f, err := b.build(w, rb)
			if err != nil {
				return nil, err
			}
			if rb.kind == kNull {
				return func(any) (any, error) { return nil, nil }, nil
			}
			name := rb.unionName()
			return func(v any) (any, error) {
				out, err := f(v)
				if err != nil {
					return nil, err
				}
				return map[string]any{name: out}, nil
			}, nil
		}
		return nil, fmt.Errorf("the reader's union has no branch for the writer's %s", describe(w))
	}
	switch {
	case w.kind == r.kind && w.kind <= kString:
		return logicalConvert(w, r), nil
	case w.kind == kInt && r.kind == kLong:
		return func(v any) (any, error) { return int64(v.(int32)), nil }, nil
	case w.kind == kInt && r.kind == kFloat:
		return func(v any) (any, error) { return float32(v.(int32)), nil }, nil
	case w.kind == kInt && r.kind == kDouble:
		return func(v any) (any, error) { return float64(v.(int32)), nil }, nil
	case w.kind == kLong && r.kind == kFloat:
		return func(v any) (any, error) { return float32(asInt64(v)), nil }, nil
	case w.kind == kLong && r.kind == kDouble:
		return func(v any) (any, error) { return float64(asInt64(v)), nil }, nil
	case w.kind == kFloat && r.kind == kDouble:
		return func(v any) (any, error) { return float64(v.(float32)), nil }, nil
	case w.kind == kString && r.kind == kBytes:
		return func(v any) (any, error) { return []byte(v.(string)), nil }, nil
	case w.kind == kBytes && r.kind == kString:
		return func(v any) (any, error) { return string(v.([]byte)), nil }, nil
	case w.kind == kRecord && r.kind == kRecord:
		return b.record(w, r)
	case w.kind == kEnum && r.kind == kEnum:
		return func(v any) (any, error) {
			sym := v.(string)
			if slices.Contains(r.symbols, sym) {
				return sym, nil
			}
			if r.enumDflt != "" {
				return r.enumDflt, nil
			}
			return nil, fmt.Errorf("enum symbol %q is not in the reader's %s", sym, r.name)
		}, nil
	case w.kind == kArray && r.kind == kArray:
		f, err := b.build(w.items, r.items)
		if err != nil {
			return nil, err
		}
		return func(v any) (any, error) {
			in := v.([]any)
			out := make([]any, len(in))
			for i, x := range in {
				if out[i], err = f(x); err != nil {
					return nil, err
				}
			}
			return out, nil
		}, nil
	case w.kind == kMap && r.kind == kMap:
		f, err := b.build(w.values, r.values)
		if err != nil {
			return nil, err
		}
		return func(v any) (any, error) {
			in := v.(map[string]any)
			out := make(map[string]any, len(in))
			for k, x := range in {
				y, err := f(x)
				if err != nil {
					return nil, err
				}
				out[k] = y
			}
			return out, nil
		}, nil
	case w.kind == kFixed && r.kind == kFixed && w.size == r.size:
		return identity, nil
	}
	return nil, fmt.Errorf("the writer's %s cannot be read as the reader's %s", describe(w), describe(r))
}

func describe(s *schema) string {
	if s.name != "" {
		return s.kind.String() + " " + s.name
	}
	return s.kind.String()
}

func asInt64(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case time.Time:
		return x.UnixMilli()
	case time.Duration:
		return x.Microseconds()
	}
	return 0
}

// matches reports whether data of w can be read as r, for picking a
// union branch: the same type (by name for named types), or a promotion.
func matches(w, r *schema) bool {
	if w.kind == r.kind {
		switch w.kind {
		case kRecord, kEnum, kFixed:
			return w.name == r.name || slices.Contains(r.aliases, w.name) || shortName(w.name) == shortName(r.name)
		}
		return true
	}
	switch w.kind {
	case kInt:
		return r.kind == kLong || r.kind == kFloat || r.kind == kDouble
	case kLong:
		return r.kind == kFloat || r.kind == kDouble
	case kFloat:
		return r.kind == kDouble
	case kString:
		return r.kind == kBytes
	case kBytes:
		return r.kind == kString
	}
	return false
}

func shortName(n string) string {
	for i := len(n) - 1; i >= 0; i-- {
		if n[i] == '.' {
			return n[i+1:]
		}
	}
	return n
}

// logicalConvert handles a primitive read as the same primitive with a
// different logical type (a long read as timestamp-millis, and back).
func logicalConvert(w, r *schema) resolver {
	if w.logical == r.logical {
		return identity
	}
	switch r.logical {
	case "timestamp-millis":
		return func(v any) (any, error) {
			if t, ok := v.(time.Time); ok {
				return t, nil
			}
			return time.UnixMilli(asInt64(v)).UTC(), nil
		}
	case "timestamp-micros":
		return func(v any) (any, error) {
			if t, ok := v.(time.Time); ok {
				return t, nil
			}
			return time.UnixMicro(asInt64(v)).UTC(), nil
		}
	}
	switch w.logical {
	case "timestamp-millis":
		return func(v any) (any, error) { return v.(time.Time).UnixMilli(), nil }
	case "timestamp-micros":
		return func(v any) (any, error) { return v.(time.Time).UnixMicro(), nil }
	case "decimal":
		return func(v any) (any, error) {
			if rat, ok := v.(*big.Rat); ok {
				return []byte(rat.RatString()), nil
			}
			return v, nil
		}
	}
	return identity
}

func (b *resolveBuilder) record(w, r *schema) (resolver, error) {
	type step struct {
		name  string
		from  string // writer field, "" when the default is used
		f     resolver
		deflt any
	}
	var steps []step
	for _, rf := range r.fields {
		var wf *field
		for _, cand := range w.fields {
			if cand.name == rf.name || slices.Contains(rf.aliases, cand.name) {
				wf = cand
				break
			}
		}
		if wf == nil {
			if !rf.hasDefault {
				return nil, fmt.Errorf("record %s: field %q is not in the writer's schema and has no default", r.name, rf.name)
			}
			d, err := defaultNative(rf.typ, rf.dflt)
			if err != nil {
				return nil, fmt.Errorf("record %s: default of field %q: %w", r.name, rf.name, err)
			}
			steps = append(steps, step{name: rf.name, deflt: d})
			continue
		}
		f, err := b.build(wf.typ, rf.typ)
		if err != nil {
			return nil, fmt.Errorf("record %s field %q: %w", r.name, rf.name, err)
		}
		steps = append(steps, step{name: rf.name, from: wf.name, f: f})
	}
	return func(v any) (any, error) {
		in := v.(map[string]any)
		out := make(map[string]any, len(steps))
		for _, s := range steps {
			if s.from == "" {
				out[s.name] = s.deflt
				continue
			}
			x, err := s.f(in[s.from])
			if err != nil {
				return nil, fmt.Errorf("field %s: %w", s.name, err)
			}
			out[s.name] = x
		}
		return out, nil
	}, nil
}

// defaultNative turns a field default (decoded JSON) into goavro's native
// form for type s. A union's default is of its first branch.
func defaultNative(s *schema, d any) (any, error) {
	switch s.kind {
	case kNull:
		return nil, nil
	case kBoolean:
		b, ok := d.(bool)
		if !ok {
			return nil, fmt.Errorf("default %v is not a boolean", d)
		}
		return b, nil
	case kInt, kLong, kFloat, kDouble:
		n, ok := d.(float64)
		if !ok {
			return nil, fmt.Errorf("default %v is not a number", d)
		}
		switch s.kind {
		case kInt:
			if s.logical == "date" {
				return time.Unix(int64(n)*86400, 0).UTC(), nil
			}
			return int32(n), nil
		case kLong:
			switch s.logical {
			case "timestamp-millis":
				return time.UnixMilli(int64(n)).UTC(), nil
			case "timestamp-micros":
				return time.UnixMicro(int64(n)).UTC(), nil
			}
			return int64(n), nil
		case kFloat:
			return float32(n), nil
		}
		return n, nil
	case kString, kEnum:
		str, ok := d.(string)
		if !ok {
			return nil, fmt.Errorf("default %v is not a string", d)
		}
		return str, nil
	case kBytes, kFixed:
		str, ok := d.(string)
		if !ok {
			return nil, fmt.Errorf("default %v is not a string", d)
		}
		out := make([]byte, 0, len(str))
		for _, r := range str {
			out = append(out, byte(r))
		}
		return out, nil
	case kArray:
		arr, ok := d.([]any)
		if !ok {
			return nil, fmt.Errorf("default %v is not an array", d)
		}
		out := make([]any, len(arr))
		for i, x := range arr {
			v, err := defaultNative(s.items, x)
			if err != nil {
				return nil, err
			}
			out[i] = v
		}
		return out, nil
	case kMap:
		m, ok := d.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("default %v is not an object", d)
		}
		out := make(map[string]any, len(m))
		for k, x := range m {
			v, err := defaultNative(s.values, x)
			if err != nil {
				return nil, err
			}
			out[k] = v
		}
		return out, nil
	case kRecord:
		m, ok := d.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("default %v is not an object", d)
		}
		out := make(map[string]any, len(s.fields))
		for _, f := range s.fields {
			x, present := m[f.name]
			if !present {
				if !f.hasDefault {
					return nil, fmt.Errorf("default lacks field %q", f.name)
				}
				x = f.dflt
			}
			v, err := defaultNative(f.typ, x)
			if err != nil {
				return nil, err
			}
			out[f.name] = v
		}
		return out, nil
	case kUnion:
		first := s.branches[0]
		v, err := defaultNative(first, d)
		if err != nil || first.kind == kNull {
			return v, err
		}
		return map[string]any{first.unionName(): v}, nil
	}
	return nil, fmt.Errorf("unsupported default for %s", s.kind)
}
