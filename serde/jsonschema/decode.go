package jsonschema

import (
	"encoding"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// decodeErr is the error of a record encoding/json could not decode into
// t, naming the field that failed as a JSON pointer ("at /created_at: …").
func decodeErr(t reflect.Type, body []byte, id int, err error) error {
	where := ""
	if path := failingField(t, body, 0); path != "" {
		where = " at " + path
	}
	return fmt.Errorf("jsonschema: decoding %v (schema id %d)%s: %w", t, id, where, err)
}

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// maxFieldDepth bounds how deep failingField looks.
const maxFieldDepth = 64

// failingField returns the JSON pointer, within body, of the innermost
// member whose decoding into its Go type fails ("" when body fails as a
// whole: not JSON, or a value its type's own decoder refuses).
func failingField(t reflect.Type, body []byte, depth int) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if depth > maxFieldDepth || reflect.PointerTo(t).Implements(jsonUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler) {
		return ""
	}
	fails := func(t reflect.Type, raw json.RawMessage) bool {
		return json.Unmarshal(raw, reflect.New(t).Interface()) != nil
	}
	switch t.Kind() {
	case reflect.Struct:
		var obj map[string]json.RawMessage
		if json.Unmarshal(body, &obj) != nil {
			return ""
		}
		fields := jsonFields(t)
		for _, k := range slices.Sorted(maps.Keys(obj)) {
			ft, ok := fieldType(fields, k)
			if ok && fails(ft, obj[k]) {
				return "/" + pointerToken(k) + failingField(ft, obj[k], depth+1)
			}
		}
	case reflect.Map:
		var obj map[string]json.RawMessage
		if json.Unmarshal(body, &obj) != nil {
			return ""
		}
		for _, k := range slices.Sorted(maps.Keys(obj)) {
			if fails(t.Elem(), obj[k]) {
				return "/" + pointerToken(k) + failingField(t.Elem(), obj[k], depth+1)
			}
		}
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return "" // []byte: base64 text
		}
		var arr []json.RawMessage
		if json.Unmarshal(body, &arr) != nil {
			return ""
		}
		for i, raw := range arr {
			if fails(t.Elem(), raw) {
				return "/" + strconv.Itoa(i) + failingField(t.Elem(), raw, depth+1)
			}
		}
	}
	return ""
}

// jsonFields maps the JSON names of a struct's fields (encoding/json's:
// tags, embedded structs' fields promoted) to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	var walk func(t reflect.Type, depth int)
	walk = func(t reflect.Type, depth int) {
		for i := range t.NumField() {
			f := t.Field(i)
			tag := f.Tag.Get("json")
			if tag == "-" {
				continue
			}
			name, _, _ := strings.Cut(tag, ",")
			ft := f.Type
			if f.Anonymous && name == "" {
				for ft.Kind() == reflect.Pointer {
					ft = ft.Elem()
				}
				if ft.Kind() == reflect.Struct && depth < maxFieldDepth {
					walk(ft, depth+1)
					continue
				}
			}
			if !f.IsExported() {
				continue
			}
			if name == "" {
				name = f.Name
			}
			if _, ok := out[name]; !ok {
				out[name] = f.Type
			}
		}
	}
	walk(t, 0)
	return out
}

// fieldType finds a JSON member's field as encoding/json does: by exact
// name, else case-insensitively.
func fieldType(fields map[string]reflect.Type, key string) (reflect.Type, bool) {
	if t, ok := fields[key]; ok {
		return t, true
	}
	for name, t := range fields {
		if strings.EqualFold(name, key) {
			return t, true
		}
	}
	return nil, false
}

// pointerToken escapes a member name for a JSON pointer (RFC 6901).
func pointerToken(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}
