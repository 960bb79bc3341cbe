#if canImport(Glibc)
import Glibc
#endif
import GatewayCore
import Meters
import Support
import SyncEngine
import Testing
import TestSupport

@testable import Gateway

/// Files on disk: the config file itself, secret files and their modes, the shipped example.
@Suite struct ConfigLoaderTests {
    @Test func secretFileIsReadAndTrimmed() throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        try dir.write("ns.secret", "0123456789abcdef\n")
        try dir.write("fhir.token", "bearer-xyz\r\n")
        let config = try dir.write("gw.toml", """
        [nightscout]
        url = "https://ns.example"
        api_secret_file = "ns.secret"
        [fhir]
        enabled = true
        base_url = "https://fhir.example/r4"
        subject = "Patient/7"
        bearer_token_file = "\(dir.path)/fhir.token"
        """, mode: 0o644)
        let loaded = try ConfigLoader.load(path: config)
        #expect(loaded.path == config)
        #expect(loaded.nightscout.credential == .apiSecret(Secret("0123456789abcdef", file: dir.path + "/ns.secret")))
        #expect(loaded.fhir.bearerToken?.value == "bearer-xyz")
        #expect(loaded.summaryLines().contains("api_secret: (set, from \(dir.path)/ns.secret)"))
        #expect(!loaded.summaryLines().joined().contains("0123456789abcdef"))
    }

    struct ModeCase: CustomTestStringConvertible, Sendable {
        var mode: mode_t
        var accepted: Bool
        var testDescription: String { "mode " + String(mode, radix: 8) }
    }

    @Test(arguments: [
        ModeCase(mode: 0o600, accepted: true), ModeCase(mode: 0o400, accepted: true), ModeCase(mode: 0o700, accepted: true),
        ModeCase(mode: 0o640, accepted: false), ModeCase(mode: 0o604, accepted: false), ModeCase(mode: 0o644, accepted: false),
        ModeCase(mode: 0o620, accepted: false), ModeCase(mode: 0o601, accepted: false),
    ])
    func secretFileModeIsEnforced(_ c: ModeCase) throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        try dir.write("token", "tok-en\n", mode: c.mode)
        let config = try dir.write("gw.toml", "[nightscout]\nurl = \"https://ns.example\"\n\ntoken_file = \"token\"\n")
        let problems = ConfigLoader.check(path: config)
        if c.accepted {
            #expect(problems == [])
        } else {
            #expect(problems.count == 1)
            #expect(problems.first?.line == 4)
            #expect(problems.first?.message.contains("accessible by group or others (mode 0" + String(c.mode, radix: 8) + ")") == true)
            #expect(problems.first?.message.contains("tok-en") == false)
        }
    }

    @Test func inlineSecretsInAWorldReadableFileAreWarnedAbout() throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let text = "[nightscout]\nurl = \"https://ns.example\"\napi_secret = \"0123456789abcdef\"\n[fhir]\nbearer_token = \"tok\"\n"
        let open = try dir.write("open.toml", text, mode: 0o644)
        let warnings = ConfigLoader.warnings(for: try ConfigLoader.load(path: open))
        #expect(warnings.count == 2)
        #expect(warnings.first?.hasPrefix("nightscout.api_secret is written in a file every local user can read (mode 0644)") == true)
        #expect(!warnings.joined().contains("0123456789abcdef"))
        let closed = try dir.write("closed.toml", text, mode: 0o640)
        #expect(ConfigLoader.warnings(for: try ConfigLoader.load(path: closed)) == [])
        try dir.write("ns.secret", "0123456789abcdef\n")
        let viaFile = try dir.write("file.toml", "[nightscout]\nurl = \"https://ns.example\"\napi_secret_file = \"ns.secret\"\n", mode: 0o644)
        #expect(ConfigLoader.warnings(for: try ConfigLoader.load(path: viaFile)) == [])
    }

    @Test func missingAndEmptySecretFilesAreRefused() throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        try dir.write("empty", "\n")
        let config = try dir.write("gw.toml", """
        [nightscout]
        url = "https://ns.example"
        token_file = "absent"
        [fhir]
        bearer_token_file = "empty"
        """)
        let problems = ConfigLoader.check(path: config)
        #expect(problems.map(\.line) == [3, 5])
        #expect(problems.first?.message == "nightscout.token_file: the file does not exist")
        #expect(problems.last?.message.contains("must not be empty") == true)
    }

    @Test func missingConfigFileIsAnError() throws {
        let problems = ConfigLoader.check(path: "/nonexistent-dir/gw.toml")
        #expect(problems == [ConfigProblem(line: 0, message: "cannot read config file: does not exist")])
        #expect(throws: GatewayFailure.self) { try ConfigLoader.load(path: "/nonexistent-dir/gw.toml") }
        do {
            _ = try ConfigLoader.load(explicitPath: "/nonexistent-dir/gw.toml")
            Issue.record("an explicit missing path must fail")
        } catch {
            #expect(error.status == .config)
            #expect(error.message == "/nonexistent-dir/gw.toml: cannot read config file: does not exist")
        }
    }

    @Test func aDirectoryIsNotAConfigFile() throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        #expect(ConfigLoader.check(path: dir.path).first?.message == "cannot read config file: is not a regular file")
    }

    @Test func aFIFOIsRefusedWithoutWaitingForAWriter() throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let fifo = dir.path + "/gw.toml"
        #expect(mkfifo(fifo, 0o600) == 0)
        #expect(ConfigLoader.check(path: fifo).first?.message == "cannot read config file: is not a regular file")
    }

    @Test func loadThrowsTheFirstProblemWithItsLine() throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let config = try dir.write("gw.toml", "[network]\nretry_count = 3\nnetwork_timeout_ms = 50\nbogus = true\n")
        do {
            _ = try ConfigLoader.load(path: config)
            Issue.record("load must fail")
        } catch {
            #expect(error.status == .config)
            #expect(error.message.hasPrefix("\(config):3: network.network_timeout_ms: out of range 100..10000 (and 1 more"))
        }
    }

    /// The shipped example is valid as installed, and documents every key with its default.
    @Test func shippedExampleIsValidAndDocumentsEveryKey() throws {
        let example = Self.repositoryRoot() + "/config/glucose-gateway.toml"
        let (config, problems) = ConfigLoader.evaluate(path: example)
        #expect(problems == [])
        #expect(config.gateway == GatewaySection())
        #expect(config.network == NetworkSection())
        #expect(!config.hasDestination)

        guard case .success(let bytes) = FileContents.contents(of: example, limit: 1 << 20) else {
            Issue.record("cannot read \(example)")
            return
        }
        let lines = String(decoding: bytes, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        for (section, keys) in ConfigLoader.schema {
            guard let header = lines.firstIndex(of: "[\(section)]") else {
                Issue.record("[\(section)] missing from the example")
                continue
            }
            let next = lines[(header + 1)...].firstIndex { $0.hasPrefix("[") } ?? lines.count
            let body = Array(lines[(header + 1)..<next])
            for key in keys {
                guard let at = body.firstIndex(where: { $0.hasPrefix("\(key) = ") || $0.hasPrefix("#\(key) = ") }) else {
                    Issue.record("\(section).\(key) is not shown in the example")
                    continue
                }
                // The comment block above the key (or above the first key of a shared block) names the default.
                var start = at
                while start > 0 && !body[start - 1].isEmpty { start -= 1 }
                let block = body[start..<at].joined(separator: "\n")
                #expect(block.contains("Default") || block.contains("Required"), "\(section).\(key) has no documented default")
            }
        }
    }

    /// Each key is read by one owner: the owners' key lists make the schema and never overlap.
    @Test func everyKeyHasOneOwner() {
        for (section, keys) in ConfigLoader.schema {
            #expect(Set(keys).count == keys.count, "a key of [\(section)] is listed twice")
        }
        #expect(ConfigLoader.schema.map(\.section) == ["gateway", "nightscout", "fhir", "mqtt", "network"])
    }

    /// The download options come from the meter-side keys, the same for `sync` and the daemon.
    @Test func downloadOptionsCarryEveryMeterKey() throws {
        let (config, problems) = ConfigLoader.evaluate(bytes: Array("""
        [gateway]
        clock_skew_correction = false
        clock_skew_threshold_s = 300
        future_tolerance_s = 60
        download_idle_timeout_s = 45
        set_meter_clock = true
        """.utf8), path: "/nonexistent-dir/gw.toml")
        #expect(problems == [])
        let options = config.gateway.meters.downloadOptions
        #expect(options.inactivityTimeout == .seconds(45))
        #expect(options.clinical == ClinicalSettings(clockSkewCorrection: false, clockSkewThresholdSeconds: 300, futureToleranceSeconds: 60))
        #expect(options.setMeterClock)
        #expect(DaemonSettings(config: config, destinations: []).download == options)
        #expect(GatewayConfig().gateway.meters.downloadOptions == DownloadOptions())
    }

    static func repositoryRoot(_ file: String = #filePath) -> String {
        // .../Tests/GatewayTests/ConfigLoaderTests.swift -> ...
        var path = file
        for _ in 0..<3 { path = ConfigFiles.directory(of: path) }
        return path
    }
}
