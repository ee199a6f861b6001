// The C++ seal's codec, both ways (tests/test_multipl_e_seal_compiled.py): every type MultiPL-E's
// C++ prompts return, recorded, written, read back and compared exactly (floats bit for bit).
// Compiled with `-include easylemur_seal.h` (seals/support/el.hpp); trusted code, no candidate's.

using namespace easylemur_seal;
template <class T> bool same(const T& a, const T& b) { return a == b; }
bool same(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }
bool same(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }
int main() {
    double payload;
    uint64_t bits = 0x7ff800000000beefULL;
    std::memcpy(&payload, &bits, sizeof payload);
    auto values = std::make_tuple(
        true, false, LONG_MIN, LONG_MAX, 0L, ULONG_MAX, -7, 'x', (signed char)-128, (unsigned char)255,
        -0.0f, std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity(), 0.1f,
        std::numeric_limits<float>::denorm_min(), -0.0, payload, 0.1 + 0.2, std::numeric_limits<double>::max(),
        std::string("a\0b c:d\n\xff 1:x ", 15), std::string(), std::vector<long>{1, -2, 3}, std::vector<long>(),
        std::vector<std::vector<long>>{{}, {1}, {}}, std::vector<bool>{true, false, true}, std::vector<float>{0.5f, -0.0f},
        std::vector<std::string>{"", " ", "x y"}, std::tuple<long, std::string, float>{1, "x y", 2.5f},
        std::pair<long, long>{1, 2}, std::optional<long>(), std::optional<std::string>("s"),
        std::map<std::string, long>{{"a", 1}, {"b b", -2}}, std::map<long, long>(),
        std::unordered_map<long, long>{{1, 2}, {3, 4}}, std::set<long>{3, 1},
        std::variant<long, float, std::string>(std::string("v")), std::variant<long, float, std::string>(2.5f),
        std::tuple<std::optional<long>, std::optional<long>>{std::nullopt, 3},
        std::vector<std::tuple<long, long>>{{1, 2}, {3, 4}}, std::tuple<>());
    std::apply([](const auto&... v) { (record(v), ...); }, values);
    flush("written");
    bool ok = true;
    std::apply([&](const auto&... v) { ((ok = ok && same(v, next<std::decay_t<decltype(v)>>())), ...); }, values);
    if (!ok) return 1;
    done("read back");
}
