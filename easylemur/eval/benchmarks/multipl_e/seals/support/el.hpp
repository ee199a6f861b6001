// easylemur's seal for MultiPL-E's C++ (seals/cpp.py): the values that cross from a sealed
// program's driver (untrusted: it holds the candidate's code) to its judge (trusted: MultiPL-E's
// tests), one per call of the function under test, typed by the function's declared return type.
//
// The driver records each call's value (`record`) and writes them all to the file `values` at
// its end (`flush`); the judge's stub returns the next one (`next_for`), parsed, never executed,
// and the judge's last statement (`done`) checks that every value was used before it prints the
// end marker. Anything malformed, short or of the wrong shape ends the judge with status 3: a
// failure, never a pass. Any value the judge accepts is one the function could have returned.
//
// Format: tokens, each followed by one space. An integer (bool: 0 or 1) in decimal; float and
// double as the unsigned decimal of their bits (exact: -0.0, NaN and infinities too); a string
// as "<bytes>:<bytes of it>"; a vector, map or set as its size, then its elements (a map's as
// key, value); an optional as 0, or 1 and its value; a tuple or pair as its elements; a variant
// (and a union of MultiPL-E's prompts, tracked through its constructors) as its index, then the
// value of that alternative.
#include <bits/stdc++.h>

namespace easylemur_seal {

[[noreturn]] inline void bad(const char* why) {
    std::fprintf(stderr, "\neasylemur: the program's values cannot be used: %s\n", why);
    std::fflush(stderr);
    std::_Exit(3);
}

template <class T> struct unsupported : std::false_type {};

// One specialization per type that can cross; `put` appends to the driver's values, `get`
// parses the judge's.
template <class T, class = void> struct Codec {
    static_assert(unsupported<T>::value, "easylemur: a value of this type cannot cross from the program to the judge");
};

// ---------------------------------------------------------------- the driver's side

inline std::string& out() {
    static std::string s;
    return s;
}

inline void word(const std::string& w) {
    out() += w;
    out() += ' ';
}

// Where each union of the prompt was built and from which alternative (its constructors tell).
inline std::map<const void*, int>& made_at() {
    static std::map<const void*, int> m;
    return m;
}

inline void made(const void* at, int alternative) { made_at()[at] = alternative; }

inline int made_as(const void* at) {
    auto it = made_at().find(at);
    return it == made_at().end() ? -1 : it->second;
}

template <class T> void record(const T& value) { Codec<T>::put(value); }

// The driver's last statement: the values file, then the program's end marker.
inline void flush(const char* marker) {
    std::FILE* f = std::fopen("values", "wb");
    if (f == nullptr || std::fwrite(out().data(), 1, out().size(), f) != out().size() || std::fclose(f) != 0) {
        std::fprintf(stderr, "\neasylemur: cannot write the values file\n");
        std::_Exit(3);
    }
    std::printf("\n%s\n", marker);
    std::fflush(stdout);
}

// ---------------------------------------------------------------- the judge's side

struct Input {
    std::string data;
    size_t at = 0;
};

inline Input& in() {
    static Input input;
    static bool loaded = false;
    if (!loaded) {
        loaded = true;
        std::FILE* f = std::fopen("values", "rb");
        if (f == nullptr) bad("no values file");
        char buf[65536];
        size_t n;
        while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) input.data.append(buf, n);
        std::fclose(f);
    }
    return input;
}

// The digits of one token up to `stop` (which is consumed); a leading '-' when `sign` allows it.
inline unsigned long long digits(bool sign, bool& negative, char stop = ' ') {
    Input& s = in();
    negative = false;
    if (sign && s.at < s.data.size() && s.data[s.at] == '-') {
        negative = true;
        s.at++;
    }
    size_t start = s.at;
    unsigned long long v = 0;
    while (s.at < s.data.size() && s.data[s.at] >= '0' && s.data[s.at] <= '9') {
        unsigned d = unsigned(s.data[s.at] - '0');
        if (v > (std::numeric_limits<unsigned long long>::max() - d) / 10) bad("a number out of range");
        v = v * 10 + d;
        s.at++;
    }
    if (s.at == start || s.at - start > 20) bad("a malformed number");
    if (s.at - start > 1 && s.data[start] == '0') bad("a number with a leading zero");
    if (negative && v == 0) bad("a negative zero integer");
    if (s.at >= s.data.size() || s.data[s.at] != stop) bad("a malformed separator");
    s.at++;
    return v;
}

inline unsigned long long count() {
    bool negative;
    unsigned long long n = digits(false, negative);
    // every element takes two bytes at least: a count beyond that is a lie, not an allocation
    if (n > (in().data.size() - in().at) / 2 + 1) bad("a size beyond the values left");
    return n;
}

inline size_t alternative(size_t alternatives) {
    bool negative;
    unsigned long long k = digits(false, negative);
    if (k >= alternatives) bad("an alternative out of range");
    return size_t(k);
}

template <class R, class... A> R next_for(R (*)(A...)) { return Codec<R>::get(); }
template <class T> T next() { return Codec<T>::get(); }

// The judge's last statement: every value was used; then the end marker.
inline void done(const char* marker) {
    if (in().at != in().data.size()) bad("more values than calls");
    std::printf("\n%s\n", marker);
    std::fflush(stdout);
}

// ---------------------------------------------------------------- the types

template <> struct Codec<bool> {
    static void put(bool v) { word(v ? "1" : "0"); }
    static bool get() {
        bool negative;
        unsigned long long v = digits(false, negative);
        if (v > 1) bad("a bool that is neither 0 nor 1");
        return v == 1;
    }
};

template <class T>
struct Codec<T, std::enable_if_t<std::is_integral<T>::value && !std::is_same<T, bool>::value>> {
    static void put(T v) {
        word(std::is_signed<T>::value ? std::to_string((long long)v) : std::to_string((unsigned long long)v));
    }
    static T get() {
        bool negative;
        unsigned long long m = digits(std::is_signed<T>::value, negative);
        if (std::is_signed<T>::value) {
            long long lo = (long long)std::numeric_limits<T>::min(), hi = (long long)std::numeric_limits<T>::max();
            // -m without overflow: m is at most 2^63 for any long long
            if (negative ? m > (unsigned long long)hi + 1 || -(long long)(m - 1) - 1 < lo : m > (unsigned long long)hi)
                bad("an integer out of range");
            return negative ? T(-(long long)(m - 1) - 1) : T(m);
        }
        if (m > (unsigned long long)std::numeric_limits<T>::max()) bad("an integer out of range");
        return T(m);
    }
};

template <class T, class Bits> struct FloatCodec {
    static_assert(sizeof(T) == sizeof(Bits), "float layout");
    static void put(T v) {
        Bits b;
        std::memcpy(&b, &v, sizeof b);
        word(std::to_string((unsigned long long)b));
    }
    static T get() {
        bool negative;
        unsigned long long m = digits(false, negative);
        if (m > (unsigned long long)std::numeric_limits<Bits>::max()) bad("float bits out of range");
        Bits b = Bits(m);
        T v;
        std::memcpy(&v, &b, sizeof v);
        return v;
    }
};
template <> struct Codec<float> : FloatCodec<float, uint32_t> {};
template <> struct Codec<double> : FloatCodec<double, uint64_t> {};

template <> struct Codec<std::string> {
    static void put(const std::string& v) {
        out() += std::to_string(v.size());
        out() += ':';
        out() += v;
        out() += ' ';
    }
    static std::string get() {
        bool negative;
        unsigned long long n = digits(false, negative, ':');
        Input& s = in();
        if (n >= s.data.size() - s.at) bad("a string beyond the values left");
        std::string v = s.data.substr(s.at, size_t(n));
        s.at += size_t(n);
        if (s.data[s.at] != ' ') bad("a malformed separator");
        s.at++;
        return v;
    }
};

template <class T, class A> struct Codec<std::vector<T, A>> {
    static void put(const std::vector<T, A>& v) {
        word(std::to_string(v.size()));
        for (const auto& x : v) Codec<T>::put(T(x));  // T(x): vector<bool>'s elements are proxies
    }
    static std::vector<T, A> get() {
        unsigned long long n = count();
        std::vector<T, A> v;
        for (unsigned long long i = 0; i < n; i++) v.push_back(Codec<T>::get());
        return v;
    }
};

// std::map, std::unordered_map (M::value_type is a pair of a const key and the mapped value)
template <class M> struct MapCodec {
    using K = typename M::key_type;
    using V = typename M::mapped_type;
    static void put(const M& m) {
        word(std::to_string(m.size()));
        for (const auto& kv : m) {
            Codec<K>::put(kv.first);
            Codec<V>::put(kv.second);
        }
    }
    static M get() {
        unsigned long long n = count();
        M m;
        for (unsigned long long i = 0; i < n; i++) {
            K k = Codec<K>::get();
            V v = Codec<V>::get();
            if (!m.emplace(std::move(k), std::move(v)).second) bad("a key twice");
        }
        return m;
    }
};
template <class K, class V, class C, class A> struct Codec<std::map<K, V, C, A>> : MapCodec<std::map<K, V, C, A>> {};
template <class K, class V, class H, class E, class A>
struct Codec<std::unordered_map<K, V, H, E, A>> : MapCodec<std::unordered_map<K, V, H, E, A>> {};

template <class S> struct SetCodec {
    using K = typename S::key_type;
    static void put(const S& s) {
        word(std::to_string(s.size()));
        for (const auto& k : s) Codec<K>::put(k);
    }
    static S get() {
        unsigned long long n = count();
        S s;
        for (unsigned long long i = 0; i < n; i++)
            if (!s.insert(Codec<K>::get()).second) bad("an element twice");
        return s;
    }
};
template <class K, class C, class A> struct Codec<std::set<K, C, A>> : SetCodec<std::set<K, C, A>> {};
template <class K, class H, class E, class A>
struct Codec<std::unordered_set<K, H, E, A>> : SetCodec<std::unordered_set<K, H, E, A>> {};

template <class T> struct Codec<std::optional<T>> {
    static void put(const std::optional<T>& v) {
        word(v ? "1" : "0");
        if (v) Codec<T>::put(*v);
    }
    static std::optional<T> get() {
        if (alternative(2) == 0) return std::nullopt;
        return std::optional<T>(Codec<T>::get());
    }
};

template <class... T> struct Codec<std::tuple<T...>> {
    static void put(const std::tuple<T...>& v) {
        std::apply([](const T&... x) { (Codec<T>::put(x), ...); }, v);
    }
    // braces: the elements are read left to right
    static std::tuple<T...> get() { return std::tuple<T...>{Codec<T>::get()...}; }
};

template <class A, class B> struct Codec<std::pair<A, B>> {
    static void put(const std::pair<A, B>& v) {
        Codec<A>::put(v.first);
        Codec<B>::put(v.second);
    }
    static std::pair<A, B> get() {
        A a = Codec<A>::get();
        B b = Codec<B>::get();
        return std::pair<A, B>(std::move(a), std::move(b));
    }
};

template <class... T> struct Codec<std::variant<T...>> {
    using V = std::variant<T...>;
    static void put(const V& v) {
        if (v.valueless_by_exception()) bad("a valueless variant");
        word(std::to_string(v.index()));
        std::visit([](const auto& x) { Codec<std::decay_t<decltype(x)>>::put(x); }, v);
    }
    template <size_t I> static V make() {
        return V(std::in_place_index<I>, Codec<std::variant_alternative_t<I, V>>::get());
    }
    template <size_t... I> static V get(std::index_sequence<I...>) {
        static V (*const makers[])() = {&make<I>...};
        return makers[alternative(sizeof...(T))]();
    }
    static V get() { return get(std::index_sequence_for<T...>{}); }
};

}  // namespace easylemur_seal
