// fix_cpp.cpp: C++ fixture: a class template's method, overloads and an anonymous namespace,
// whose names the symbolizer must demangle.
#include "fixture.h"

FIXTURE_DEFS
FIXTURE_RET_ADDR_DEF

namespace ns
{

// A class template with a member defined out of class.
template <typename T> struct Klass {
    __attribute__((noipa)) T method(T x);
};

// Instantiated for int and double.
template <typename T> T Klass<T>::method(T x)
{
    SITE(sizeof(T) == sizeof(int) ? "method_int" : "method_double");
    return x + 1;
}

// Overloads: told apart by their demangled parameter lists.
__attribute__((noipa)) int over(int x)
{
    SITE("over_int");
    return x + 1;
}

// The double overload.
__attribute__((noipa)) double over(double x)
{
    SITE("over_double");
    return x * 2;
}

namespace
{
// Internal linkage: no linkage name in DWARF.
__attribute__((noipa)) int hidden(int x)
{
    SITE("hidden");
    return x - 1;
}

// Internal and inlined: named from its DWARF scopes.
inline __attribute__((always_inline)) int helper(int x)
{
    SITE("helper");
    return x * 5;
}
} // namespace

// A member function template of a class template, with an inlined internal helper.
template <typename T> struct Outer {
    // A member function template.
    template <typename U> __attribute__((noipa)) static U convert(U u)
    {
        U r;
        AT_LINE("convert_calls_helper", r = helper((int)u) + 1);
        return r;
    }
};

} // namespace ns

// Record the sites, print them, wait to be killed.
int main()
{
    ns::Klass<int> k;
    ns::Klass<double> d;
    k.method(1);
    d.method(1.0);
    ns::over(1);
    ns::over(2.0);
    ns::hidden(3);
    ns::Outer<char>::convert<long>(4);
    fixture_report_and_wait();
}
