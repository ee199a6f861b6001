// easylemur's sealed MultiPL-E Java (seals/java.py): the values of the calls of the function under
// test, as data. The program stage records each call's value (`out`) and writes the file `values`
// (`write`); the judge's stub hands them back one per call (`next`) and its last statement checks
// that every one was used (`done`). Any value that is no plain JDK value (null, a boxed primitive, a
// String, a java.util List or Map, an Optional, an org.javatuples tuple, nested) cannot cross: its
// record throws. Each value crosses as its own class (a Long stays a Long, a Pair a Pair), and any
// List or Map as the JDK's own ArrayList or HashMap, so no method of the candidate's (an `equals`
// that is always true, a `hashCode`, a `toString`) reaches the comparison. Grammar, ASCII:
//   n | z0 | z1 | j<long>; | i<int>; | s<short>; | b<byte>; | c<hex>; | f<hex bits>; | d<hex bits>;
//   | S<length>;<chars: printable ASCII but \, or \ and 4 hex digits> | L<n>;<value>*n
//   | M<n>;(<key><value>)*n | O0 | O1<value> | T<class>;<n>;<value>*n
// The reader parses it (it never loads a class a value names beyond that fixed list) and throws
// on anything else: a garbled, short or long file fails the tests' run.
final class EasylemurSeal {
    private static final int DEPTH = 200;
    private static final StringBuilder OUT = new StringBuilder();
    private static String in;
    private static int at;

    private EasylemurSeal() {}

    // ---- the program stage

    static void out(Object v) {
        put(OUT, v, 0);
    }

    // writes the values file, then prints the program's end marker: the driver's last statement
    static void write(String marker) {
        try {
            java.nio.file.Files.write(java.nio.file.Paths.get("values"), OUT.toString().getBytes(java.nio.charset.StandardCharsets.US_ASCII));
        } catch (java.io.IOException e) {
            throw new java.io.UncheckedIOException(e);
        }
        System.out.println("\n" + marker);
    }

    private static void put(StringBuilder b, Object v, int depth) {
        if (depth > DEPTH) throw new IllegalStateException("a value nested too deep to record");
        if (v == null) { b.append('n'); return; }
        Class<?> k = v.getClass();
        if (k == Boolean.class) b.append((Boolean) v ? "z1" : "z0");
        else if (k == Long.class) b.append('j').append((long) (Long) v).append(';');
        else if (k == Integer.class) b.append('i').append((int) (Integer) v).append(';');
        else if (k == Short.class) b.append('s').append((short) (Short) v).append(';');
        else if (k == Byte.class) b.append('b').append((byte) (Byte) v).append(';');
        else if (k == Character.class) b.append('c').append(Integer.toHexString((Character) v)).append(';');
        else if (k == Float.class) b.append('f').append(Integer.toHexString(Float.floatToRawIntBits((Float) v))).append(';');
        else if (k == Double.class) b.append('d').append(Long.toHexString(Double.doubleToRawLongBits((Double) v))).append(';');
        else if (k == String.class) {
            String s = (String) v;
            b.append('S').append(s.length()).append(';');
            for (int i = 0; i < s.length(); i++) {
                char c = s.charAt(i);
                if (c >= 0x20 && c < 0x7f && c != '\\') b.append(c);
                else b.append('\\').append(String.format("%04x", (int) c));
            }
        } else if (v instanceof java.util.List) {
            Object[] items = ((java.util.List<?>) v).toArray();
            b.append('L').append(items.length).append(';');
            for (Object x : items) put(b, x, depth + 1);
        } else if (v instanceof java.util.Map) {
            Object[] entries = ((java.util.Map<?, ?>) v).entrySet().toArray();
            b.append('M').append(entries.length).append(';');
            for (Object e : entries) {
                put(b, ((java.util.Map.Entry<?, ?>) e).getKey(), depth + 1);
                put(b, ((java.util.Map.Entry<?, ?>) e).getValue(), depth + 1);
            }
        } else if (k == java.util.Optional.class) {
            java.util.Optional<?> o = (java.util.Optional<?>) v;
            b.append(o.isPresent() ? "O1" : "O0");
            if (o.isPresent()) put(b, o.get(), depth + 1);
        } else if (k.getSuperclass() == org.javatuples.Tuple.class && TUPLES.contains(k.getSimpleName())
                && k.getName().equals("org.javatuples." + k.getSimpleName())) {
            org.javatuples.Tuple t = (org.javatuples.Tuple) v;
            b.append('T').append(k.getSimpleName()).append(';').append(t.getSize()).append(';');
            for (int i = 0; i < t.getSize(); i++) put(b, t.getValue(i), depth + 1);
        } else {
            throw new IllegalStateException("a value of class " + k.getName() + " cannot be recorded");
        }
    }

    private static final java.util.List<String> TUPLES = java.util.List.of("Unit", "Pair", "Triplet", "Quartet", "Quintet", "Sextet",
            "Septet", "Octet", "Ennead", "Decade", "KeyValue", "LabelValue");

    // ---- the judge

    @SuppressWarnings("unchecked")
    static <T> T next() {
        if (in == null) load();
        if (at >= in.length()) throw new IllegalStateException("the values file holds fewer values than the calls");
        return (T) get(0);
    }

    // the judge's last statement: every value was used; then the judge's end marker
    static void done(String marker) {
        if (in == null) load();
        if (at != in.length()) throw new IllegalStateException("the values file holds more values than the calls");
        System.out.println("\n" + marker);
    }

    private static void load() {
        byte[] bytes;
        try {
            bytes = java.nio.file.Files.readAllBytes(java.nio.file.Paths.get("values"));
        } catch (java.io.IOException e) {
            throw new IllegalStateException("the values file cannot be read", e);
        }
        for (byte x : bytes) {
            if (x < 0x20 || x >= 0x7f) throw new IllegalStateException("the values file is not printable ASCII");
        }
        in = new String(bytes, java.nio.charset.StandardCharsets.US_ASCII);
        at = 0;
    }

    private static char take() {
        if (at >= in.length()) throw new IllegalStateException("the values file ends inside a value");
        return in.charAt(at++);
    }

    private static String field() {  // the text up to the next ';'
        int end = in.indexOf(';', at);
        if (end < 0) throw new IllegalStateException("the values file ends inside a value");
        String s = in.substring(at, end);
        at = end + 1;
        return s;
    }

    private static int count() {
        int n = Integer.parseInt(field());
        if (n < 0 || n > in.length() - at) throw new IllegalStateException("a count beyond the values file");
        return n;
    }

    private static Object get(int depth) {
        if (depth > DEPTH) throw new IllegalStateException("a value nested too deep");
        char tag = take();
        switch (tag) {
            case 'n': return null;
            case 'z': {
                char c = take();
                if (c != '0' && c != '1') throw new IllegalStateException("a malformed boolean");
                return c == '1';
            }
            case 'j': return Long.parseLong(field());
            case 'i': return Integer.parseInt(field());
            case 's': return Short.parseShort(field());
            case 'b': return Byte.parseByte(field());
            case 'c': {
                int c = Integer.parseInt(field(), 16);
                if (c < 0 || c > 0xffff) throw new IllegalStateException("a malformed char");
                return (char) c;
            }
            case 'f': return Float.intBitsToFloat(Integer.parseUnsignedInt(field(), 16));
            case 'd': return Double.longBitsToDouble(Long.parseUnsignedLong(field(), 16));
            case 'S': {
                int n = count();
                StringBuilder s = new StringBuilder(n);
                for (int i = 0; i < n; i++) {
                    char c = take();
                    if (c == '\\') {
                        if (at + 4 > in.length()) throw new IllegalStateException("a malformed string");
                        c = (char) Integer.parseInt(in.substring(at, at + 4), 16);
                        at += 4;
                    }
                    s.append(c);
                }
                return s.toString();
            }
            case 'L': {
                int n = count();
                java.util.ArrayList<Object> l = new java.util.ArrayList<>(n);
                for (int i = 0; i < n; i++) l.add(get(depth + 1));
                return l;
            }
            case 'M': {
                int n = count();
                java.util.HashMap<Object, Object> m = new java.util.HashMap<>();
                for (int i = 0; i < n; i++) {
                    Object key = get(depth + 1);
                    m.put(key, get(depth + 1));
                }
                return m;
            }
            case 'O': {
                char c = take();
                if (c == '0') return java.util.Optional.empty();
                if (c == '1') return java.util.Optional.of(get(depth + 1));
                throw new IllegalStateException("a malformed Optional");
            }
            case 'T': {
                String name = field();
                int n = count();
                Object[] a = new Object[n];
                for (int i = 0; i < n; i++) a[i] = get(depth + 1);
                return tuple(name, a);
            }
            default: throw new IllegalStateException("an unknown tag in the values file");
        }
    }

    private static Object tuple(String name, Object[] a) {
        int n = a.length;
        switch (name) {
            case "Unit": if (n == 1) return org.javatuples.Unit.with(a[0]); break;
            case "Pair": if (n == 2) return org.javatuples.Pair.with(a[0], a[1]); break;
            case "KeyValue": if (n == 2) return org.javatuples.KeyValue.with(a[0], a[1]); break;
            case "LabelValue": if (n == 2) return org.javatuples.LabelValue.with(a[0], a[1]); break;
            case "Triplet": if (n == 3) return org.javatuples.Triplet.with(a[0], a[1], a[2]); break;
            case "Quartet": if (n == 4) return org.javatuples.Quartet.with(a[0], a[1], a[2], a[3]); break;
            case "Quintet": if (n == 5) return org.javatuples.Quintet.with(a[0], a[1], a[2], a[3], a[4]); break;
            case "Sextet": if (n == 6) return org.javatuples.Sextet.with(a[0], a[1], a[2], a[3], a[4], a[5]); break;
            case "Septet": if (n == 7) return org.javatuples.Septet.with(a[0], a[1], a[2], a[3], a[4], a[5], a[6]); break;
            case "Octet": if (n == 8) return org.javatuples.Octet.with(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]); break;
            case "Ennead": if (n == 9) return org.javatuples.Ennead.with(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8]); break;
            case "Decade": if (n == 10) return org.javatuples.Decade.with(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9]); break;
            default: break;
        }
        throw new IllegalStateException("an unknown tuple in the values file");
    }
}
