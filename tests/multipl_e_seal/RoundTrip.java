// The Java seal's codec (easylemur/eval/benchmarks/multipl_e/seals/support/EasylemurSeal.java) on its own,
// outside any sandbox (tests/test_multipl_e_seal_jvm_go.py): values of every class it carries are
// recorded and read back the same, values of other classes cannot be recorded, malformed files
// are refused. Prints "written", "read", then "round trip ok"; exits 1 on any failure.
import java.util.*;
import org.javatuples.*;

class RoundTrip {
    static int failures = 0;

    static void check(String what, boolean ok) {
        if (!ok) {
            failures++;
            System.out.println("FAIL " + what);
        }
    }

    // equal, of the same classes throughout (a List as an ArrayList, a Map as a HashMap), floats by their bits
    static boolean same(Object a, Object b) {
        if (a == null || b == null) return a == b;
        if (a instanceof List) {
            if (b.getClass() != ArrayList.class || ((List<?>) a).size() != ((List<?>) b).size()) return false;
            for (int i = 0; i < ((List<?>) a).size(); i++) if (!same(((List<?>) a).get(i), ((List<?>) b).get(i))) return false;
            return true;
        }
        if (a instanceof Map) {
            Map<?, ?> m = (Map<?, ?>) a, n = (Map<?, ?>) b;
            if (b.getClass() != HashMap.class || m.size() != n.size()) return false;
            for (Map.Entry<?, ?> e : m.entrySet()) {
                Object k = n.keySet().stream().filter(x -> same(e.getKey(), x)).findFirst().orElse(null);
                if (k == null && e.getKey() != null || !same(e.getValue(), n.get(k))) return false;
            }
            return true;
        }
        if (a instanceof Float) return b instanceof Float && Float.floatToRawIntBits((Float) a) == Float.floatToRawIntBits((Float) b);
        if (a instanceof Double) return b instanceof Double && Double.doubleToRawLongBits((Double) a) == Double.doubleToRawLongBits((Double) b);
        if (a instanceof Optional) return b instanceof Optional && ((Optional<?>) a).isPresent() == ((Optional<?>) b).isPresent()
                && (!((Optional<?>) a).isPresent() || same(((Optional<?>) a).get(), ((Optional<?>) b).get()));
        if (a instanceof Tuple) {
            if (a.getClass() != b.getClass()) return false;
            for (int i = 0; i < ((Tuple) a).getSize(); i++) if (!same(((Tuple) a).getValue(i), ((Tuple) b).getValue(i))) return false;
            return true;
        }
        return a.getClass() == b.getClass() && a.equals(b);
    }

    public static void main(String[] args) throws Exception {
        Object[] values = {5L, Long.MIN_VALUE, Long.MAX_VALUE, 7, Integer.MIN_VALUE, (short) -3, (byte) -128, 'x', '\uD800',
            0.5f, -0.0f, Float.NaN, Float.intBitsToFloat(0x7fc00001), Float.MIN_VALUE, Float.NEGATIVE_INFINITY,
            1e300, -0.0, Double.longBitsToDouble(0x7ff8000000000123L), 0.1 + 0.2, true, false, null,
            "", "a\\b;\"\n\t\u00e9\u0000\uD83D\uDE00\uDC00 L3;j1;", new ArrayList<>(List.of(1L, 2L)), new ArrayList<>(),
            new LinkedList<>(List.of("x")), Arrays.asList(1, null, 2.5f), new ArrayList<Long>() {{ add(3L); }},
            new ArrayList<>(List.of(new ArrayList<>(List.of(1L)), new ArrayList<>())),
            new HashMap<>(Map.of("a", 1L, "b", 2L)), new TreeMap<>(Map.of(2L, List.of("y"), 1L, List.of())),
            new LinkedHashMap<>(Map.of(Pair.with(1L, 2L), Optional.of(3L))), new HashMap<>(),
            Optional.empty(), Optional.of(Optional.of("x")), Optional.of(new ArrayList<>(List.of(Optional.empty()))),
            Unit.with(1L), Pair.with(1L, Optional.empty()), KeyValue.with("k", 1L), LabelValue.with("l", 2L),
            Triplet.with(1L, "b", 2.5f), Quartet.with(1, 2, 3, 4), Quintet.with(1, 2, 3, 4, 5),
            Sextet.with(1, 2, 3, 4, 5, 6), Septet.with(1, 2, 3, 4, 5, 6, 7), Octet.with(1, 2, 3, 4, 5, 6, 7, 8),
            Ennead.with(1, 2, 3, 4, 5, 6, 7, 8, 9), Decade.with(1, 2, 3, 4, 5, 6, 7, 8, 9, 10),
            Pair.with(new ArrayList<>(List.of(Pair.with("a", 1L))), new HashMap<>(Map.of("z", Triplet.with(1L, 2L, 3L))))};
        for (Object v : values) EasylemurSeal.out(v);
        EasylemurSeal.write("written");
        for (Object v : values) check("round trip of " + v, same(v, EasylemurSeal.next()));
        EasylemurSeal.done("read");
        for (Object v : new Object[] {new int[] {1}, new Object(), new HashSet<>(List.of(1L)), new StringBuilder("x"),
                                      new ArrayList<>(List.of(new Object()))}) {
            try {
                EasylemurSeal.out(v);
                check("recorded " + v, false);
            } catch (IllegalStateException e) {
                // a value of a class the encoding does not carry: the program stage fails
            }
        }
        java.lang.reflect.Field in = EasylemurSeal.class.getDeclaredField("in"), at = EasylemurSeal.class.getDeclaredField("at");
        in.setAccessible(true);
        at.setAccessible(true);
        String[] garbled = {"", "j12", "jx;", "j99999999999999999999;", "L2;j1;", "L-1;", "L99999999999;", "M1;j1;",
            "S5;ab", "S2;\\zzzz", "S1;\\12", "z2", "O2", "x", "c110000;", "fx;", "f1ffffffff;", "Tjava.lang.Runtime;0;",
            "TPair;3;j1;j2;j3;", "TPair;x;", "L1;".repeat(300) + "n", "j1;j2;"};
        for (String g : garbled) {
            in.set(null, g);
            at.set(null, 0);
            try {
                EasylemurSeal.next();
                EasylemurSeal.done("accepted");
                check("accepted " + g, false);
            } catch (RuntimeException e) {
                // a malformed, short or long values file fails the tests
            }
        }
        java.nio.file.Files.write(java.nio.file.Paths.get("values"), new byte[] {'S', '1', ';', (byte) 0xe9});
        in.set(null, null);
        try {
            EasylemurSeal.next();
            check("accepted a byte that is not ASCII", false);
        } catch (RuntimeException e) {
            // a file that is not printable ASCII fails
        }
        System.out.println(failures == 0 ? "round trip ok" : failures + " failures");
        System.exit(failures == 0 ? 0 : 1);
    }
}
