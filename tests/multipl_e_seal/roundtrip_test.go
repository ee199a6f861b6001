// The Go seal's codec (easylemur/eval/benchmarks/multipl_e/seals/support/el_out.go, el_in.go) on
// its own, outside any sandbox (tests/test_multipl_e_seal_jvm_go.py): values of the types MultiPL-E's
// Go prompts return, and more, recorded with their static types and read back as the judge does;
// malformed files panic.
package easylemur_rt_test

import (
	"fmt"
	"math"
	"os"
	"reflect"
	"strings"
	"testing"
)

type count int

func (c count) String() string { return fmt.Sprintf("<%d>", int(c)) }

type box struct{ a []int }

var checks []func(t *testing.T)

// put records v as a function of return type T would; its check reads it back as the judge does
// and compares what the tests' comparison sees: the %v text (and the type, T's own but for an
// interface type, whose value comes back as that text).
func put[T any](v T) {
	easylemurPut(v)
	checks = append(checks, func(t *testing.T) {
		got := easylemurNext[T]()
		same := fmt.Sprintf("%v", got) == fmt.Sprintf("%v", v)
		// a value of an interface type comes back as its text: a string
		if reflect.TypeOf(&v).Elem().Kind() != reflect.Interface {
			same = same && fmt.Sprintf("%T", got) == fmt.Sprintf("%T", v)
		}
		if !same {
			t.Errorf("%T %v came back as %T %v", v, v, got, got)
		}
	})
}

func refuses(t *testing.T, what string, data string, read func()) {
	easylemurIn.loaded, easylemurIn.used, easylemurIn.values = false, 0, nil
	if err := os.WriteFile("values", []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if recover() == nil {
			t.Errorf("accepted %s: %q", what, data)
		}
	}()
	read()
	easylemurDone("")
}

func TestRoundTrip(t *testing.T) {
	ptr := &box{[]int{1}}
	put(0)
	put(math.MinInt64)
	put(int8(-7))
	put(uint64(math.MaxUint64))
	put(0.1 + 0.2)
	put(math.Copysign(0, -1))
	put(math.NaN())
	put(math.Inf(-1))
	put(1e21)
	put(float32(0.1))
	put(true)
	put("")
	put("a b\n\t\xff\x00é😀")
	put([]int{})
	put([]int(nil))
	put([][]int{{1, 2}, {}, nil})
	put([]string{"a b", ""})
	put([2]bool{true, false})
	put(map[string]int{"b": 1, "a": 2, "": 0})
	put(map[int][]string{3: {"x"}, -1: nil})
	put(map[string]int(nil))
	put([]interface{}{1, "x y", 2.5, nil, []int{1}, count(3), ptr, map[string]int{"k": 1}, 1e6})
	put([][]interface{}{{1, count(2)}, {}})
	put(map[string]interface{}{"a": count(1), "b": nil})
	put(interface{}(1e6))
	put(interface{}(count(4)))
	put(interface{}(nil))
	put(interface{}([]interface{}{ptr}))
	easylemurWrite("written")
	for _, check := range checks {
		check(t)
	}
	easylemurDone("read")

	next := func() { easylemurNext[float64]() }
	for what, data := range map[string]string{
		"an empty file": "", "no list": `"0.5"`, "null": "null", "no value": `[]`, "two values": `["1","2"]`,
		"trailing data": `["1"] []`, "a JSON number for a float": `[0.5]`, "a float's text that is none": `["0x"]`,
		"broken JSON": `["1"`, "nesting past JSON's limit": strings.Repeat("[", 20000) + strings.Repeat("]", 20000),
	} {
		refuses(t, what, data, next)
	}
	refuses(t, "an int out of range", `[99999999999999999999]`, func() { easylemurNext[int]() })
	refuses(t, "a float for an int", `[1.5]`, func() { easylemurNext[int]() })
	refuses(t, "bad base64", `["!!"]`, func() { easylemurNext[string]() })
	refuses(t, "a list of the wrong length", `[[true]]`, func() { easylemurNext[[2]bool]() })
	refuses(t, "a map entry that is no pair", `[[["a",1,2]]]`, func() { easylemurNext[map[string]int]() })
	refuses(t, "a string for a map", `["YQ=="]`, func() { easylemurNext[map[string]int]() })
	refuses(t, "a number for an interface", `[1]`, func() { easylemurNext[interface{}]() })
	refuses(t, "a value for an interface with methods", `["YQ=="]`, func() { easylemurNext[fmt.Stringer]() })
	refuses(t, "a value of a type the seal does not carry", `[null]`, func() { easylemurNext[*int]() })
}
