package easylemur_seal_test

// easylemur's sealed MultiPL-E Go, the judge (seals/go.py): the stub of the function under test
// returns easylemurNext[<declared return type>](), the next value of the file `values` (el_out.go
// wrote it) rebuilt as that type; a value of an interface type comes back as the string fmt
// printed for it, which %v prints the same. The tests' last statement calls easylemurDone,
// which checks that every value was used and prints the judge's end marker. The file is parsed,
// never run; anything malformed, short or long panics, which fails the tests.

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"reflect"
	"strconv"
)

var easylemurIn struct {
	values []interface{}
	used   int
	loaded bool
}

func easylemurLoad() {
	if easylemurIn.loaded {
		return
	}
	data, err := os.ReadFile("values")
	if err != nil {
		panic("easylemur: the values file cannot be read")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&easylemurIn.values); err != nil || easylemurIn.values == nil {
		panic("easylemur: the values file is no list of values")
	}
	if _, err := dec.Token(); err != io.EOF {
		panic("easylemur: the values file holds more than a list of values")
	}
	easylemurIn.loaded = true
}

func easylemurNext[T any]() T {
	easylemurLoad()
	if easylemurIn.used >= len(easylemurIn.values) {
		panic("easylemur: the values file holds fewer values than the calls")
	}
	var out T
	if err := easylemurDecode(reflect.ValueOf(&out).Elem(), easylemurIn.values[easylemurIn.used], 0); err != "" {
		panic("easylemur: the values file holds " + err)
	}
	easylemurIn.used++
	return out
}

func easylemurDone(marker string) {
	easylemurLoad()
	if easylemurIn.used != len(easylemurIn.values) {
		panic("easylemur: the values file holds more values than the calls")
	}
	fmt.Println("\n" + marker)
}

func easylemurText(raw interface{}) (string, string) {
	s, ok := raw.(string)
	if !ok {
		return "", "no string where one belongs"
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return "", "a malformed string"
	}
	return string(b), ""
}

// easylemurDecode sets dst (settable, its zero value) from raw; "" or what was wrong.
func easylemurDecode(dst reflect.Value, raw interface{}, depth int) string {
	if depth > 100 {
		return "a value nested too deep"
	}
	t := dst.Type()
	switch t.Kind() {
	case reflect.Bool:
		b, ok := raw.(bool)
		if !ok {
			return "no bool where one belongs"
		}
		dst.SetBool(b)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, ok := raw.(json.Number)
		i, err := strconv.ParseInt(string(n), 10, t.Bits())
		if !ok || err != nil {
			return "a malformed integer"
		}
		dst.SetInt(i)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		n, ok := raw.(json.Number)
		u, err := strconv.ParseUint(string(n), 10, t.Bits())
		if !ok || err != nil {
			return "a malformed integer"
		}
		dst.SetUint(u)
	case reflect.Float32, reflect.Float64:
		s, ok := raw.(string)
		f, err := strconv.ParseFloat(s, t.Bits())
		if !ok || err != nil {
			return "a malformed float"
		}
		dst.SetFloat(f)
	case reflect.String:
		s, bad := easylemurText(raw)
		if bad != "" {
			return bad
		}
		dst.SetString(s)
	case reflect.Slice, reflect.Array:
		items, ok := raw.([]interface{})
		if !ok || (t.Kind() == reflect.Array && len(items) != t.Len()) {
			return "no list of the right length where one belongs"
		}
		if t.Kind() == reflect.Slice {
			dst.Set(reflect.MakeSlice(t, len(items), len(items)))
		}
		for i, item := range items {
			if bad := easylemurDecode(dst.Index(i), item, depth+1); bad != "" {
				return bad
			}
		}
	case reflect.Map:
		pairs, ok := raw.([]interface{})
		if !ok {
			return "no map where one belongs"
		}
		m := reflect.MakeMapWithSize(t, len(pairs))
		for _, p := range pairs {
			kv, ok := p.([]interface{})
			if !ok || len(kv) != 2 {
				return "a malformed map entry"
			}
			k, v := reflect.New(t.Key()).Elem(), reflect.New(t.Elem()).Elem()
			if bad := easylemurDecode(k, kv[0], depth+1); bad != "" {
				return bad
			}
			if bad := easylemurDecode(v, kv[1], depth+1); bad != "" {
				return bad
			}
			m.SetMapIndex(k, v)
		}
		dst.Set(m)
	case reflect.Interface:
		if raw == nil {
			return ""
		}
		s, bad := easylemurText(raw)
		if bad != "" {
			return bad
		}
		if t.NumMethod() != 0 {
			return "a value for an interface with methods"
		}
		dst.Set(reflect.ValueOf(s))
	default:
		return "a value of a type the seal does not carry (" + t.String() + ")"
	}
	return ""
}
