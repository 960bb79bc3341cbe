#if canImport(Glibc)
import Glibc
#endif
import Testing
import Support

/// The environment as the commands read it: each entry split at its first `=`, the rest of it the value.
@Suite struct ProcessEnvironmentTests {
    @Test func entriesSplitAtTheFirstEqualsSign() {
        setenv("GG_ENV_TEST_PLAIN", "/run/dbus/system_bus_socket", 1)
        setenv("GG_ENV_TEST_EQUALS", "unix:path=/tmp/a=b", 1)
        setenv("GG_ENV_TEST_EMPTY", "", 1)
        setenv("GG_ENV_TEST_TEXT", "Zürich \u{301}=é", 1)
        defer {
            for name in ["GG_ENV_TEST_PLAIN", "GG_ENV_TEST_EQUALS", "GG_ENV_TEST_EMPTY", "GG_ENV_TEST_TEXT"] { unsetenv(name) }
        }
        let environment = ProcessEnvironment.current()
        #expect(environment["GG_ENV_TEST_PLAIN"] == "/run/dbus/system_bus_socket")
        #expect(environment["GG_ENV_TEST_EQUALS"] == "unix:path=/tmp/a=b")
        #expect(environment["GG_ENV_TEST_EMPTY"] == "")
        #expect(environment["GG_ENV_TEST_TEXT"] == "Zürich \u{301}=é")
        #expect(environment["GG_ENV_TEST_MISSING"] == nil)
    }
}
