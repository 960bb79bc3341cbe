#if canImport(Glibc)
import Glibc
#endif
import GatewayCore
import Testing
import TestSupport

@testable import Gateway

/// Problem messages name the key and say what is wrong, and never quote what the file holds: a value may
/// be a secret pasted in the wrong place.
@Suite struct ConfigValueQuotingTests {
    /// A text that must appear in no message.
    static let marker = "Zq7Marker"

    struct Case: CustomTestStringConvertible, Sendable {
        var name: String
        var text: String
        /// What the first problem says instead.
        var says: String
        var testDescription: String { name }
    }

    static let cases: [Case] = [
        Case(name: "topic_prefix", text: "[mqtt]\nurl = \"mqtt://127.0.0.1\"\ntopic_prefix = \"a b \(marker)\"\n",
             says: "mqtt.topic_prefix: expected topic levels of letters, digits, '_', '-' and '.' separated by '/' (no '+', '#' or spaces)"),
        Case(name: "unknown section", text: "[\(marker)]\nx = 1\n", says: "unknown section (sections: "),
        Case(name: "unknown section near a known one", text: "[gatway\(marker.prefix(0))]\n", says: "unknown section (did you mean 'gateway'?)"),
        Case(name: "unknown key", text: "[network]\n\(marker) = 3\n", says: "unknown key in [network]"),
        Case(name: "log_level", text: "[gateway]\nlog_level = \"\(marker)\"\n", says: "gateway.log_level: expected one of error, warning, notice, info, debug"),
        Case(name: "scan_mode", text: "[gateway]\nscan_mode = \"\(marker)\"\n", says: "gateway.scan_mode: expected \"discovery\" or \"profile\""),
        Case(name: "units", text: "[nightscout]\nunits = \"\(marker)\"\n", says: "nightscout.units: expected \"mg/dl\" or \"mmol\""),
        Case(name: "api", text: "[nightscout]\napi = \"\(marker)\"\n", says: "nightscout.api: expected \"v1\" or \"v3\""),
        Case(name: "time_zone syntax", text: "[gateway]\ntime_zone = \"../\(marker)\"\n", says: "gateway.time_zone: expected an IANA time zone name such as \"Europe/Berlin\""),
        Case(name: "time_zone unknown", text: "[gateway]\ntime_zone = \"Mars/\(marker)\"\n", says: "gateway.time_zone: unknown time zone"),
        Case(name: "relative command", text: "[network]\non_network_error = \"\(marker).sh\"\n", says: "network.on_network_error: the program must be an absolute path"),
        Case(name: "missing command", text: "[network]\non_network_error = [\"/nonexistent/\(marker)\"]\n", says: "network.on_network_error: the program is not an executable file"),
        Case(name: "missing CA file", text: "[nightscout]\nca_file = \"/nonexistent/\(marker).pem\"\n", says: "nightscout.ca_file: the file does not exist"),
        Case(name: "missing secret file", text: "[nightscout]\nurl = \"http://127.0.0.1\"\ntoken_file = \"/nonexistent/\(marker)\"\n", says: "nightscout.token_file: the file does not exist"),
        Case(name: "integer out of range", text: "[network]\nretry_count = 4711\n", says: "network.retry_count: out of range 0..10"),
    ]

    @Test(arguments: cases)
    func noProblemQuotesAValue(_ c: Case) throws {
        let problems = ConfigLoader.evaluate(bytes: Array(c.text.utf8), path: "/etc/glucose-gateway/gw.toml").problems
        let first = try #require(problems.first)
        #expect(first.message.hasPrefix(c.says), "\(first.message)")
        for problem in problems {
            #expect(!problem.message.contains(Self.marker) && !problem.message.contains("4711"), "\(problem.message)")
        }
    }

    /// A symbolic link loop as a secret or CA file says so, rather than "does not exist".
    @Test func aSymbolicLinkLoopSaysWhatItIs() throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        #expect(symlink(dir.path + "/b", dir.path + "/a") == 0)
        #expect(symlink(dir.path + "/a", dir.path + "/b") == 0)
        let text = "[nightscout]\nurl = \"http://127.0.0.1\"\ntoken_file = \"a\"\nca_file = \"b\"\n"
        let problems = ConfigLoader.evaluate(bytes: Array(text.utf8), path: dir.path + "/gw.toml").problems.map(\.message)
        #expect(problems.contains("nightscout.token_file: the file is a symbolic link loop"), "\(problems)")
        #expect(problems.contains("nightscout.ca_file: the file is a symbolic link loop"), "\(problems)")
    }

    /// `metrics_file` is replaced by the daemon: an existing path that is not a regular file (a FIFO, a
    /// directory, a character device made in the temporary directory when the process may, a file of
    /// /proc) is refused by the check; a free path, a regular file and a symbolic link are taken.
    @Test func metricsFileMustNotNameADevice() throws {
        let dir = try TempDirectory()
        defer {
            rmdir(dir.path + "/directory")
            dir.remove()
        }
        #expect(mkfifo(dir.path + "/fifo", 0o600) == 0)
        #expect(mkdir(dir.path + "/directory", 0o700) == 0)
        var refused = [dir.path + "/fifo", dir.path + "/directory", "/proc/self/environ", "/dev/null"]
        if mknod(dir.path + "/null", S_IFCHR | 0o600, dev_t((1 << 8) | 3)) == 0 { refused.append(dir.path + "/null") }
        for path in refused {
            let text = "[gateway]\nmetrics_file = \"\(path)\"\n"
            let (config, problems) = ConfigLoader.evaluate(bytes: Array(text.utf8), path: dir.path + "/gw.toml")
            #expect(problems.count == 1 && problems.first?.line == 2, "\(path): \(problems)")
            #expect(problems.first?.message.hasPrefix("gateway.metrics_file: ") == true)
            #expect(problems.first?.message.contains(path) == false)
            #expect(config.gateway.metricsFile == nil)
        }
        try dir.write("metrics.prom", "")
        #expect(symlink(dir.path + "/metrics.prom", dir.path + "/link.prom") == 0)
        for name in ["new.prom", "metrics.prom", "link.prom"] {
            let text = "[gateway]\nmetrics_file = \"\(name)\"\n"
            let (config, problems) = ConfigLoader.evaluate(bytes: Array(text.utf8), path: dir.path + "/gw.toml")
            #expect(problems.isEmpty, "\(name): \(problems)")
            #expect(config.gateway.metricsFile == dir.path + "/" + name)
        }
    }
}
