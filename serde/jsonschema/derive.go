package jsonschema

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"time"
)

// Derive returns a JSON Schema (draft-07) for values of the Go type t as
// encoding/json writes and reads them: an object per struct, its
// properties named as their json tags say, required unless omitempty or a
// pointer, no other properties (a closed content model, so that adding an
// optional field later is a compatible change under the registry's
// BACKWARD rules); integers, numbers, strings, booleans; []byte as a base64
// string; time.Time as a date-time string; slices as arrays; maps with
// string keys as objects; pointers as the type or null; interfaces as any
// value. Recursive types and channels or functions are errors: give those
// a schema with WithSchema.
func Derive(t reflect.Type) (string, error) {
	d := deriver{seen: map[reflect.Type]bool{}}
	s, err := d.schema(t)
	if err != nil {
		return "", err
	}
	s["$schema"] = "http://json-schema.org/draft-07/schema#"
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Name() != "" {
		s["title"] = t.Name()
	}
	b, err := json.Marshal(s)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

type deriver struct {
	seen map[reflect.Type]bool // structs on the current path
}

var (
	timeType = reflect.TypeFor[time.Time]()
	rawType  = reflect.TypeFor[json.RawMessage]()
	marshal  = reflect.TypeFor[json.Marshaler]()
)

func (d deriver) schema(t reflect.Type) (map[string]any, error) {
	switch {
	case t == timeType:
		return map[string]any{"type": "string", "format": "date-time"}, nil
	case t == rawType:
		return map[string]any{}, nil
	case t.Kind() != reflect.Pointer && t.Kind() != reflect.Interface && t.Implements(marshal):
		return nil, fmt.Errorf("jsonschema: %s has its own JSON encoding: give its schema with WithSchema", t)
	}
	switch t.Kind() {
	case reflect.Bool:
		return map[string]any{"type": "boolean"}, nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return map[string]any{"type": "integer"}, nil
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}, nil
	case reflect.String:
		return map[string]any{"type": "string"}, nil
	case reflect.Interface:
		return map[string]any{}, nil
	case reflect.Pointer:
		inner, err := d.schema(t.Elem())
		if err != nil {
			return nil, err
		}
		return map[string]any{"oneOf": []any{map[string]any{"type": "null"}, inner}}, nil
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 && t.Kind() == reflect.Slice {
			return map[string]any{"type": "string", "contentEncoding": "base64"}, nil
		}
		items, err := d.schema(t.Elem())
		if err != nil {
			return nil, err
		}
		s := map[string]any{"type": "array", "items": items}
		if t.Kind() == reflect.Slice {
			s["type"] = []any{"array", "null"} // encoding/json writes a nil slice as null
		}
		return s, nil
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			return nil, fmt.Errorf("jsonschema: map key %s: only string keys are derived", t.Key())
		}
		values, err := d.schema(t.Elem())
		if err != nil {
			return nil, err
		}
		return map[string]any{"type": []any{"object", "null"}, "additionalProperties": values}, nil
	case reflect.Struct:
		return d.object(t)
	}
	return nil, fmt.Errorf("jsonschema: %s cannot be written as JSON", t)
}

func (d deriver) object(t reflect.Type) (map[string]any, error) {
	if d.seen[t] {
		return nil, fmt.Errorf("jsonschema: %s is recursive: give its schema with WithSchema", t)
	}
	d.seen[t] = true
	defer delete(d.seen, t)
	props := map[string]any{}
	var required []string
	if err := d.fields(t, props, &required); err != nil {
		return nil, err
	}
	s := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		s["required"] = required
	}
	return s, nil
}

// fields adds t's fields to props, embedded structs' fields inline, as
// encoding/json does.
func (d deriver) fields(t reflect.Type, props map[string]any, required *[]string) error {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			if err := d.fields(f.Type, props, required); err != nil {
				return err
			}
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		s, err := d.schema(f.Type)
		if err != nil {
			return fmt.Errorf("field %s: %w", f.Name, err)
		}
		props[name] = s
		if !strings.Contains(","+opts+",", ",omitempty,") && !strings.Contains(","+opts+",", ",omitzero,") && f.Type.Kind() != reflect.Pointer {
			*required = append(*required, name)
		}
	}
	return nil
}
