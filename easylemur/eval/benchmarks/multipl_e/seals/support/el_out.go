package easylemur_seal_test

// easylemur's sealed MultiPL-E Go, the program stage (seals/go.py): the driver hands each value
// the function under test returned to easylemurPut, with its static type (the declared return
// type); easylemurWrite encodes them all once every call has run (when the tests would format
// them), writes the file `values` and prints the program's end marker. The encoding follows the
// static type: bools, integers and floats exactly (a float as its shortest round-trip text, so
// NaN and the infinities too), strings as their bytes (base64), slices and arrays as lists, maps
// as lists of [key, value]; a value of an interface type (`interface{}`: MultiPL-E's tuples
// and Any) as the text fmt's %v prints for it there, which is all the tests' comparison
// (`fmt.Sprintf("%v", ...)`) sees of it. The judge's el_in.go rebuilds the declared type.

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"strconv"
)

var easylemurValues []reflect.Value

func easylemurPut[T any](v T) {
	easylemurValues = append(easylemurValues, reflect.ValueOf(&v).Elem())
}

func easylemurWrite(marker string) {
	out := make([]interface{}, len(easylemurValues))
	for i, v := range easylemurValues {
		out[i] = easylemurEncode(v, 0)
	}
	data, err := json.Marshal(out)
	if err != nil {
		panic(err)
	}
	if err := os.WriteFile("values", data, 0o644); err != nil {
		panic(err)
	}
	fmt.Println("\n" + marker)
}

func easylemurEncode(v reflect.Value, depth int) interface{} {
	if depth > 100 {
		panic("easylemur: a value nested too deep to record")
	}
	switch v.Kind() {
	case reflect.Bool:
		return v.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return json.Number(strconv.FormatInt(v.Int(), 10))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return json.Number(strconv.FormatUint(v.Uint(), 10))
	case reflect.Float32, reflect.Float64:
		return strconv.FormatFloat(v.Float(), 'g', -1, v.Type().Bits())
	case reflect.String:
		return base64.StdEncoding.EncodeToString([]byte(v.String()))
	case reflect.Slice, reflect.Array:
		items := make([]interface{}, v.Len())
		for i := range items {
			items[i] = easylemurEncode(v.Index(i), depth+1)
		}
		return items
	case reflect.Map:
		if v.Type().Key().Kind() == reflect.Interface {
			// fmt sorts such keys by their dynamic types and values, which their text would not keep
			panic("easylemur: a map with keys of an interface type cannot be recorded")
		}
		pairs := make([]interface{}, 0, v.Len())
		for it := v.MapRange(); it.Next(); {
			pairs = append(pairs, []interface{}{easylemurEncode(it.Key(), depth+1), easylemurEncode(it.Value(), depth+1)})
		}
		return pairs
	case reflect.Interface:
		if v.IsNil() {
			return nil
		}
		// what %v prints for it where the tests format it: the value itself at the top, an element
		// (depth > 0: a pointer prints as its address there) inside a container
		text := fmt.Sprintf("%v", v.Interface())
		if depth > 0 {
			text = fmt.Sprintf("%v", []interface{}{v.Interface()})
			text = text[1 : len(text)-1]
		}
		return base64.StdEncoding.EncodeToString([]byte(text))
	}
	panic("easylemur: a value of kind " + v.Kind().String() + " cannot be recorded")
}
