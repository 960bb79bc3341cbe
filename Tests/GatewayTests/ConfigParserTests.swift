import GatewayCore
import Support
import SyncEngine
import Testing
import TestSupport

@testable import Gateway

/// Syntax and schema rules, from config text (no secret files involved).
@Suite struct ConfigParserTests {
    static func evaluate(_ text: String, path: String = "/nonexistent-dir/gw.toml") -> (config: GatewayConfig, problems: [ConfigProblem]) {
        ConfigLoader.evaluate(bytes: Array(text.utf8), path: path)
    }

    @Test func emptyFileGivesDefaults() {
        let (config, problems) = Self.evaluate("")
        #expect(problems.isEmpty)
        var expected = GatewayConfig()
        expected.path = "/nonexistent-dir/gw.toml"
        #expect(config == expected)
        #expect(config.gateway.database == "/var/lib/glucose-gateway/gateway.sqlite3")
        #expect(config.gateway.logLevel == .info)
        #expect(config.gateway.clockSkewCorrection)
        #expect(config.gateway.clockSkewThresholdSeconds == 120)
        #expect(config.gateway.downloadIdleTimeoutSeconds == 30)
        #expect(config.gateway.scanMode == .discovery)
        #expect(!config.nightscout.enabled && !config.fhir.enabled && !config.hasDestination)
        #expect(config.network.retryCount == 3)
        #expect(config.network.networkTimeoutMilliseconds == 3000)
        #expect(config.network.recoveryMode && !config.network.errorBypass)
        #expect(config.network.onNetworkError == nil)
    }

    @Test func everyValueKindIsRead() {
        let text = """
        # comment line
        [gateway]   # trailing comment
        database = "/data/gw.sqlite3"
        adapter = "00:1a:7D:da:71:13"
        log_level = "debug"
        metrics_file = "metrics/gw.prom"
        time_zone = "UTC"
        clock_skew_correction = false
        clock_skew_threshold_s = 86_400
        download_idle_timeout_s = +5
        scan_mode = "profile"

        [nightscout]
        enabled = true
        url = "HTTPS://Night.Example.org:8443/base/"
        api_secret = "a \\"quoted\\" \\\\ secret"

        [fhir]
        enabled = true
        base_url = "http://[::1]:8080/fhir"
        subject = "Patient/abc-123.x"
        bearer_token = "tok"

        [network]
        retry_count = 0
        network_timeout_ms = 10000
        health_check_url = "http://probe.example.net/generate_204"
        recovery_mode = false
        error_bypass = true
        on_network_error = [
          "/bin/sh",   # the program
          "-c", "exit 0",
        ]
        """
        let (config, problems) = Self.evaluate(text, path: "/etc/gw/gw.toml")
        #expect(problems == [])
        #expect(config.gateway.database == "/data/gw.sqlite3")
        #expect(config.gateway.adapter == "00:1a:7D:da:71:13")
        #expect(config.gateway.logLevel == .debug)
        #expect(config.gateway.metricsFile == "/etc/gw/metrics/gw.prom")
        #expect(config.gateway.timeZone == "UTC")
        #expect(!config.gateway.clockSkewCorrection)
        #expect(config.gateway.clockSkewThresholdSeconds == 86_400)
        #expect(config.gateway.downloadIdleTimeoutSeconds == 5)
        #expect(config.gateway.scanMode == .profile)
        #expect(config.nightscout.enabled)
        #expect(config.nightscout.url == "https://night.example.org:8443/base")
        #expect(config.nightscout.credential == .apiSecret(Secret("a \"quoted\" \\ secret")))
        #expect(config.fhir.enabled)
        #expect(config.fhir.baseURL == "http://[::1]:8080/fhir")
        #expect(config.fhir.subject == "Patient/abc-123.x")
        #expect(config.fhir.bearerToken?.value == "tok")
        #expect(config.network.retryCount == 0)
        #expect(config.network.networkTimeoutMilliseconds == 10_000)
        #expect(config.network.healthCheckURL == "http://probe.example.net/generate_204")
        #expect(!config.network.recoveryMode)
        #expect(config.network.errorBypass)
        #expect(config.network.onNetworkError == ["/bin/sh", "-c", "exit 0"])
    }

    @Test func crlfLineEndsAreAccepted() {
        let (config, problems) = Self.evaluate("[network]\r\nretry_count = 7\r\n# c\r\nerror_bypass = true # x\r\n")
        #expect(problems == [])
        #expect(config.network.retryCount == 7)
        #expect(config.network.errorBypass)
    }

    @Test func leadingByteOrderMarkIsIgnored() {
        let bytes: [UInt8] = [0xEF, 0xBB, 0xBF] + Array("[network]\nretry_count = 2\n".utf8)
        let (config, problems) = ConfigLoader.evaluate(bytes: bytes, path: "/x/gw.toml")
        #expect(problems == [])
        #expect(config.network.retryCount == 2)
    }

    @Test func nightscoutEnabledDefaultsToURLPresence() {
        let on = Self.evaluate("[nightscout]\nurl = \"https://ns.example\"\ntoken = \"t0k3n\"\n")
        #expect(on.problems == [])
        #expect(on.config.nightscout.enabled)
        #expect(on.config.nightscout.credential == .token(Secret("t0k3n")))
        let off = Self.evaluate("[nightscout]\nenabled = false\n")
        #expect(off.problems == [])
        #expect(!off.config.nightscout.enabled)
    }

    @Test func onNetworkErrorAcceptsAPlainPath() {
        let (config, problems) = Self.evaluate("[network]\non_network_error = \"/bin/true\"\n")
        #expect(problems == [])
        #expect(config.network.onNetworkError == ["/bin/true"])
    }

    @Test func onMeterErrorIsACommandLikeOnNetworkError() {
        let (config, problems) = Self.evaluate("[gateway]\non_meter_error = [\"/bin/sh\", \"-c\", \"exit 0\"]\n")
        #expect(problems == [])
        #expect(config.gateway.onMeterError == ["/bin/sh", "-c", "exit 0"])
        #expect(config.summaryLines().contains("on_meter_error: /bin/sh (2 arguments)"))
        #expect(Self.evaluate("[gateway]\n").config.gateway.onMeterError == nil)
    }

    struct BadCase: CustomTestStringConvertible, Sendable {
        var name: String
        var text: String
        var line: Int
        var fragment: String
        var testDescription: String { name }
    }

    static let badCases: [BadCase] = [
        BadCase(name: "unknown section", text: "[gatway]\nx = 1\n", line: 1, fragment: "unknown section (did you mean 'gateway'?)"),
        BadCase(name: "unknown key", text: "[network]\nretries = 3\n", line: 2, fragment: "unknown key in [network]"),
        BadCase(name: "duplicate key", text: "[network]\nretry_count = 1\n\nretry_count = 2\n", line: 4, fragment: "duplicate key 'retry_count' in [network] (first set on line 2)"),
        BadCase(name: "duplicate section", text: "[network]\n[gateway]\n[network]\n", line: 3, fragment: "section [network] is already defined on line 1"),
        BadCase(name: "key before section", text: "# x\nretry_count = 1\n", line: 2, fragment: "before any [section]"),
        BadCase(name: "integer for string", text: "[gateway]\ndatabase = 5\n", line: 2, fragment: "gateway.database: expected a string, got an integer"),
        BadCase(name: "string for integer", text: "[network]\nretry_count = \"3\"\n", line: 2, fragment: "expected an integer in 0..10, got a string"),
        BadCase(name: "string for boolean", text: "[network]\nrecovery_mode = \"yes\"\n", line: 2, fragment: "expected true or false, got a string"),
        BadCase(name: "retry_count above range", text: "[network]\nretry_count = 11\n", line: 2, fragment: "retry_count: out of range 0..10"),
        BadCase(name: "retry_count below range", text: "[network]\nretry_count = -1\n", line: 2, fragment: "retry_count: out of range 0..10"),
        BadCase(name: "timeout below range", text: "[network]\nnetwork_timeout_ms = 99\n", line: 2, fragment: "out of range 100..10000"),
        BadCase(name: "timeout above range", text: "[network]\nnetwork_timeout_ms = 10001\n", line: 2, fragment: "out of range 100..10000"),
        BadCase(name: "skew above range", text: "[gateway]\nclock_skew_threshold_s = 86401\n", line: 2, fragment: "out of range 0..86400"),
        BadCase(name: "idle timeout below range", text: "[gateway]\ndownload_idle_timeout_s = 4\n", line: 2, fragment: "out of range 5..600"),
        BadCase(name: "bad log level", text: "[gateway]\nlog_level = \"loud\"\n", line: 2, fragment: "gateway.log_level: expected one of error"),
        BadCase(name: "bad scan mode", text: "[gateway]\nscan_mode = \"passive\"\n", line: 2, fragment: "expected \"discovery\" or \"profile\""),
        BadCase(name: "bad adapter", text: "[gateway]\nadapter = \"usb0\"\n", line: 2, fragment: "gateway.adapter"),
        BadCase(name: "bad time zone", text: "[gateway]\ntime_zone = \"Mars/Olympus_Mons\"\n", line: 2, fragment: "unknown time zone"),
        BadCase(name: "time zone escaping the zone directory", text: "[gateway]\ntime_zone = \"../../etc/passwd\"\n", line: 2, fragment: "expected an IANA time zone name"),
        BadCase(name: "empty string", text: "[gateway]\ndatabase = \"\"\n", line: 2, fragment: "must not be empty"),
        BadCase(name: "single quotes", text: "[gateway]\ndatabase = '/x'\n", line: 2, fragment: "double quotes"),
        BadCase(name: "bare word", text: "[gateway]\nscan_mode = profile\n", line: 2, fragment: "invalid value for the key 'scan_mode'"),
        BadCase(name: "float", text: "[network]\nretry_count = 1.5\n", line: 2, fragment: "invalid integer for the key 'retry_count'"),
        BadCase(name: "hex integer", text: "[network]\nretry_count = 0x3\n", line: 2, fragment: "leading zeros"),
        BadCase(name: "huge integer", text: "[network]\nretry_count = 99999999999999999999999\n", line: 2, fragment: "too large"),
        BadCase(name: "double underscore", text: "[network]\nretry_count = 1__0\n", line: 2, fragment: "invalid integer"),
        BadCase(name: "unterminated string", text: "[gateway]\ndatabase = \"/x\n", line: 2, fragment: "unterminated string"),
        BadCase(name: "unsupported escape", text: "[gateway]\ndatabase = \"C:\\db\"\n", line: 2, fragment: "unsupported escape in a string"),
        BadCase(name: "multi-line string", text: "[gateway]\ndatabase = \"\"\"x\"\"\"\n", line: 2, fragment: "multi-line strings"),
        BadCase(name: "missing equals", text: "[gateway]\ndatabase \"/x\"\n", line: 2, fragment: "expected '=' after the key 'database'"),
        BadCase(name: "missing value", text: "[gateway]\ndatabase =   # nothing\n", line: 2, fragment: "missing value for the key 'database'"),
        BadCase(name: "two statements on a line", text: "[network]\nretry_count = 1 error_bypass = true\n", line: 2, fragment: "unexpected text after the value"),
        BadCase(name: "dotted key", text: "[network]\nretry.count = 1\n", line: 2, fragment: "dotted keys"),
        BadCase(name: "quoted key", text: "[network]\n\"retry_count\" = 1\n", line: 2, fragment: "quoted keys"),
        BadCase(name: "array of tables", text: "[[network]]\n", line: 1, fragment: "arrays of tables"),
        BadCase(name: "malformed header", text: "[network\nretry_count = 1\n", line: 1, fragment: "malformed section header"),
        BadCase(name: "integer array", text: "[network]\non_network_error = [1, 2]\n", line: 2, fragment: "arrays may hold only double-quoted strings"),
        BadCase(name: "unterminated array", text: "[network]\non_network_error = [\"/bin/true\",\n\n", line: 2, fragment: "unterminated array"),
        BadCase(name: "missing comma in array", text: "[network]\non_network_error = [\"/bin/true\" \"x\"]\n", line: 2, fragment: "expected ',' or ']'"),
        BadCase(name: "array for string", text: "[gateway]\ndatabase = [\"/x\"]\n", line: 2, fragment: "expected a string, got an array"),
        BadCase(name: "empty command", text: "[network]\non_network_error = []\n", line: 2, fragment: "the command is empty"),
        BadCase(name: "relative command", text: "[network]\non_network_error = \"notify.sh\"\n", line: 2, fragment: "must be an absolute path"),
        BadCase(name: "missing command", text: "[network]\non_network_error = [\"/nonexistent/notify\"]\n", line: 2, fragment: "is not an executable file"),
        BadCase(name: "command of wrong type", text: "[network]\non_network_error = true\n", line: 2, fragment: "expected a program path (string) or an array of strings"),
        BadCase(name: "relative meter alert command", text: "[gateway]\non_meter_error = \"notify.sh\"\n", line: 2, fragment: "gateway.on_meter_error: the program must be an absolute path"),
        BadCase(name: "missing meter alert command", text: "[gateway]\n\non_meter_error = [\"/nonexistent/notify\"]\n", line: 3, fragment: "gateway.on_meter_error: the program is not an executable file"),
        BadCase(name: "ftp url", text: "[nightscout]\nurl = \"ftp://ns.example\"\ntoken = \"t\"\n", line: 2, fragment: "expected an http:// or https:// URL"),
        BadCase(name: "url with credentials", text: "[nightscout]\nurl = \"https://me:pw@ns.example\"\ntoken = \"t\"\n", line: 2, fragment: "must not carry a user name or password"),
        BadCase(name: "url with query", text: "[nightscout]\nurl = \"https://ns.example/?token=abc\"\ntoken = \"t\"\n", line: 2, fragment: "must not carry a query"),
        BadCase(name: "url without host", text: "[fhir]\nbase_url = \"https:///r4\"\n", line: 2, fragment: "URL has no host"),
        BadCase(name: "url with bad port", text: "[fhir]\nbase_url = \"https://fhir.example:99999\"\n", line: 2, fragment: "invalid port"),
        BadCase(name: "nightscout enabled without url", text: "[nightscout]\nenabled = true\ntoken = \"t\"\n", line: 2, fragment: "nightscout.url is required"),
        BadCase(name: "nightscout without credential", text: "[nightscout]\nurl = \"https://ns.example\"\n", line: 1, fragment: "needs one of api_secret, api_secret_file, token or token_file"),
        BadCase(name: "two nightscout credentials", text: "[nightscout]\nurl = \"https://ns.example\"\ntoken = \"t\"\napi_secret = \"0123456789abc\"\n", line: 4, fragment: "set only one of api_secret, api_secret_file, token, token_file (token is set on line 3)"),
        BadCase(name: "short api secret", text: "[nightscout]\nurl = \"https://ns.example\"\napi_secret = \"short\"\n", line: 3, fragment: "at least 12 characters"),
        BadCase(name: "secret with control character", text: "[nightscout]\nurl = \"https://ns.example\"\ntoken = \"a\\tb\"\n", line: 3, fragment: "one line without control characters"),
        BadCase(name: "fhir enabled without subject", text: "[fhir]\nenabled = true\nbase_url = \"https://fhir.example\"\n", line: 2, fragment: "fhir.subject is required"),
        BadCase(name: "fhir enabled without base url", text: "[fhir]\nenabled = true\nsubject = \"Patient/1\"\n", line: 2, fragment: "fhir.base_url is required"),
        BadCase(name: "bad subject", text: "[fhir]\nsubject = \"Practitioner/1\"\n", line: 2, fragment: "expected a reference such as \"Patient/123\""),
        BadCase(name: "two fhir tokens", text: "[fhir]\nbearer_token = \"x\"\nbearer_token_file = \"/x\"\n", line: 3, fragment: "set only one of bearer_token, bearer_token_file"),
        BadCase(name: "health check on the upload server", text: "[nightscout]\nurl = \"https://ns.example\"\ntoken = \"t\"\n[network]\nhealth_check_url = \"https://NS.example:443/ping\"\n", line: 5, fragment: "must not point at an upload server (same scheme, host and port as nightscout.url)"),
        BadCase(name: "health check on the fhir server", text: "[fhir]\nbase_url = \"https://fhir.example/r4\"\n[network]\nhealth_check_url = \"https://fhir.example/metadata\"\n", line: 4, fragment: "same scheme, host and port as fhir.base_url"),
        // URLs that can never work are config errors, not network states for ever (1001/1002).
        BadCase(name: "url port with a plus sign", text: "[nightscout]\nurl = \"http://127.0.0.1:+8080\"\ntoken = \"t\"\n", line: 2, fragment: "nightscout.url: invalid port in URL"),
        BadCase(name: "url port with spaces or too many digits", text: "[fhir]\nbase_url = \"http://fhir.example:008080/r4\"\n", line: 2, fragment: "fhir.base_url: invalid port in URL"),
        BadCase(name: "url with a non-ASCII host", text: "[nightscout]\nurl = \"https://b\u{FC}cher.example\"\ntoken = \"t\"\n", line: 2, fragment: "host name must be ASCII"),
        BadCase(name: "url with a trailing-dot host", text: "[nightscout]\nurl = \"https://ns.example./\"\ntoken = \"t\"\n", line: 2, fragment: "host name must not end with a dot"),
        BadCase(name: "url with an impossible IPv4 address", text: "[nightscout]\nurl = \"http://256.1.1.1\"\ntoken = \"t\"\n", line: 2, fragment: "not one"),
        BadCase(name: "url with an empty label", text: "[network]\nhealth_check_url = \"http://probe..example/\"\n", line: 2, fragment: "malformed host name"),
        BadCase(name: "url with a malformed IPv6 host", text: "[network]\nhealth_check_url = \"http://[::1::2]/\"\n", line: 2, fragment: "malformed IPv6 host"),
        // The same origin, spelled otherwise, is still the upload server.
        BadCase(name: "health check on the upload server, IPv4 short form", text: "[nightscout]\nurl = \"http://127.0.0.1:8080\"\ntoken = \"t\"\n[network]\nhealth_check_url = \"http://127.1:8080/\"\n", line: 5, fragment: "same scheme, host and port as nightscout.url"),
        BadCase(name: "health check on the upload server, IPv6 long form", text: "[fhir]\nbase_url = \"http://[::1]:8080/fhir\"\n[network]\nhealth_check_url = \"http://[0:0:0:0:0:0:0:1]:8080/\"\n", line: 4, fragment: "same scheme, host and port as fhir.base_url"),
        BadCase(name: "health check on the upload server, default port written", text: "[nightscout]\nurl = \"http://ns.example\"\ntoken = \"t\"\n[network]\nhealth_check_url = \"http://NS.EXAMPLE:80/x\"\n", line: 5, fragment: "same scheme, host and port as nightscout.url"),
        BadCase(name: "missing ca file", text: "[nightscout]\nca_file = \"/nonexistent/ca.pem\"\n", line: 2, fragment: "nightscout.ca_file: the file does not exist"),
        BadCase(name: "control character in comment", text: "[network] # a\u{01}b\n", line: 1, fragment: "control character in a comment"),
        BadCase(name: "invalid UTF-8 is not reachable through text, NUL is", text: "[gateway]\ndatabase = \"a\u{0}b\"\n", line: 2, fragment: "control character in a string"),
    ]

    @Test(arguments: badCases)
    func badInputNamesItsLine(_ c: BadCase) {
        let (_, problems) = Self.evaluate(c.text)
        #expect(problems.count == 1, "problems: \(problems)")
        #expect(problems.first?.line == c.line, "problems: \(problems)")
        #expect(problems.first?.message.contains(c.fragment) == true, "problems: \(problems)")
    }

    /// Another port on the upload server's host is another server (a probe beside a local Nightscout).
    @Test(arguments: [
        ("http://127.0.0.1:8080", "http://127.0.0.1:8081/"),
        ("http://127.0.0.1:8080", "https://127.0.0.1:8080/"),
        ("https://ns.example", "http://ns.example/"),
        ("http://[::1]:8080", "http://[::1]:9090/"),
    ])
    func healthCheckOnAnotherPortOfTheUploadHostIsAccepted(_ urls: (String, String)) {
        let (config, problems) = Self.evaluate("[nightscout]\nurl = \"\(urls.0)\"\ntoken = \"t\"\n[network]\nhealth_check_url = \"\(urls.1)\"\n")
        #expect(problems == [])
        #expect(config.network.healthCheckURL != nil)
    }

    /// No syntax error quotes what the line holds: a value, or a "key" that is really a secret (a secret
    /// file passed as the config).
    @Test(arguments: [
        "[nightscout]\nAPI_SECRET = s3cretvalue-0451\n",
        "[nightscout]\napi-secret = s3cretvalue-0451\n",
        "[nightscout]\napi_secret = s3cretvalue-0451\n",
        "[fhir]\nbearer_token = 4510s3cretvalue\n",
        "[network]\nPASSWORD = 0451s3cretvalue\n",
        "s3cretvalue-0451\n",
        "s3cretvalue0451==\n",
        "[nightscout]\ns3cretvalue0451 \"x\"\n",
        "[nightscout]\napi_secret = \"abc\" s3cretvalue0451\n",
        "[nightscout]\napi_secret = \"s3cret\\qvalue0451\"\n",
        "[nightscout]\ntoken = 99999999999999999999999s3cretvalue0451\n",
        "[nightscout]\ns3cretvalue0451.x = 1\n",
    ])
    func syntaxErrorsQuoteNoValue(_ text: String) {
        let (_, problems) = Self.evaluate(text)
        #expect(!problems.isEmpty)
        for problem in problems {
            #expect(!problem.message.contains("s3cret"), "\(problem)")
            #expect(!problem.message.contains("0451"), "\(problem)")
        }
    }

    @Test func valuesOfSecretLookingKeysAreHidden() {
        #expect(ConfigKeys.looksSecret("API_SECRET"))
        #expect(ConfigKeys.looksSecret("api-secret"))
        #expect(ConfigKeys.looksSecret("Bearer_Token_File"))
        #expect(ConfigKeys.looksSecret("pass-word"))
        #expect(!ConfigKeys.looksSecret("log_level"))
        #expect(ConfigKeys.shown("nightscout_token", "abc") == "(hidden)")
        #expect(ConfigKeys.shown("log_level", "loud") == "\"loud\"")
    }

    /// `on_network_error` is shown as its program and how many arguments it has: they may carry a
    /// token or a phone number.
    @Test func alertCommandArgumentsAreNotShown() {
        let (config, problems) = Self.evaluate("[network]\non_network_error = [\"/bin/sh\", \"-c\", \"send --token=tok-0451\"]\n")
        #expect(problems == [])
        let lines = config.summaryLines()
        #expect(lines.contains("on_network_error: /bin/sh (2 arguments)"))
        #expect(!lines.joined().contains("tok-0451"))
    }

    @Test func everyProblemIsReportedNotJustTheFirst() {
        let text = """
        [gateway]
        log_level = "loud"
        bogus = 1
        [network]
        retry_count = 20
        retry_count = 2
        network_timeout_ms = 5
        [extra]
        anything = "goes"
        """
        let problems = Self.evaluate(text).problems
        #expect(problems.map(\.line) == [2, 3, 5, 6, 7, 8])
    }

    @Test func invalidUTF8InAStringIsAProblem() {
        var bytes = Array("[gateway]\ndatabase = \"a".utf8)
        bytes += [0xC3, 0x28]
        bytes += Array("\"\n".utf8)
        let problems = ConfigLoader.evaluate(bytes: bytes, path: "/x/gw.toml").problems
        #expect(problems == [ConfigProblem(line: 2, message: "string is not valid UTF-8", section: "gateway")])
    }

    @Test func loadFailureIsOneLineWithExitStatus78() {
        let first = ConfigProblem(line: 4, message: "network.retry_count: out of range 0..10")
        let failure = ConfigLoader.failure(path: "/etc/gw.toml", first: first, count: 3)
        #expect(failure.status == .config)
        #expect(failure.message == "/etc/gw.toml:4: network.retry_count: out of range 0..10 (and 2 more; run 'glucose-gateway config check /etc/gw.toml')")
        #expect(!failure.message.contains("\n"))
    }

    @Test func inlineSecretsNeverAppearInOutput() {
        let secret = "super-secret-value-123"
        let text = """
        [nightscout]
        url = "https://ns.example"
        api_secret = "\(secret)"
        [fhir]
        bearer_token = "\(secret)-fhir"
        """
        let (config, problems) = Self.evaluate(text)
        #expect(problems == [])
        #expect(config.nightscout.credential?.secret.value == secret)
        let rendered = [
            config.summaryLines().joined(separator: "\n"),
            "\(config)", String(describing: config), String(reflecting: config),
        ]
        for text in rendered {
            #expect(!text.contains(secret))
        }
        #expect(config.summaryLines().contains("api_secret: (set)"))
        #expect(config.summaryLines().contains("bearer_token: (set)"))
    }

    @Test func secretsAreLeftOutOfProblemMessages() {
        let secret = "sh0rt"
        let problems = Self.evaluate("[nightscout]\nurl = \"https://ns.example\"\napi_secret = \"\(secret)\"\n").problems
        #expect(problems.count == 1)
        #expect(!problems.contains { $0.message.contains(secret) })
    }

    /// Random bytes and random mutations of a valid file never trap and always name a line in range.
    @Test func arbitraryInputNeverTraps() {
        var rng = SplitMix(seed: 0x6C75_636F_7365)
        let base = Array("""
        [gateway]
        database = "/x.sqlite3"
        [network]
        on_network_error = ["/bin/true", "a\\"b"]
        retry_count = 3 # c
        """.utf8)
        let alphabet = Array("[]=\"\\#,\n\r\t -+_0123456789abcxyz".utf8) + [0x00, 0x7F, 0xC3, 0xFF]
        for round in 0..<3000 {
            var bytes: [UInt8]
            if round % 3 == 0 {
                bytes = (0..<Int(rng.next() % 200)).map { _ in alphabet[Int(rng.next() % UInt64(alphabet.count))] }
            } else {
                bytes = base
                for _ in 0..<(1 + Int(rng.next() % 4)) {
                    let i = Int(rng.next() % UInt64(bytes.count))
                    switch rng.next() % 3 {
                    case 0: bytes[i] = alphabet[Int(rng.next() % UInt64(alphabet.count))]
                    case 1: bytes.remove(at: i)
                    default: bytes.insert(alphabet[Int(rng.next() % UInt64(alphabet.count))], at: i)
                    }
                    if bytes.isEmpty { break }
                }
            }
            let lineCount = bytes.filter { $0 == 0x0A }.count + 1
            let problems = ConfigLoader.evaluate(bytes: bytes, path: "/nonexistent-dir/gw.toml").problems
            for p in problems {
                #expect((1...lineCount).contains(p.line), "line \(p.line) of \(lineCount): \(p.message)")
                #expect(!p.message.contains("\n"))
            }
        }
    }
}
