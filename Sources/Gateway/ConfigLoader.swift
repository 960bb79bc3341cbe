#if canImport(Glibc)
import Glibc
#endif
import GatewayCore
import Support
import Transport

/// Reads and validates the config file.
///
/// `check(path:)` returns every problem with its line; `load(path:)` returns the typed configuration or
/// throws a one-line `GatewayFailure` with exit status 78. Relative paths in the file are taken relative to
/// the file's directory. Secrets never appear in any problem message.
public enum ConfigLoader {
    /// Larger config files are refused (a config is a few kilobytes).
    static let fileLimit = 1 << 20
    /// Larger secret files are refused.
    static let secretLimit = 64 << 10

    /// Every problem in the file at `path`; empty when it loads.
    public static func check(path: String) -> [ConfigProblem] {
        evaluate(path: path).problems
    }

    /// The configuration at `path`, or a one-line error (exit 78) naming the first problem's line.
    public static func load(path: String) throws(GatewayFailure) -> GatewayConfig {
        let (config, problems) = evaluate(path: path)
        if let first = problems.first {
            throw failure(path: path, first: first, count: problems.count)
        }
        return config
    }

    /// The configuration a command runs with: `path` (from `--config` or `GLUCOSE_GATEWAY_CONFIG`) must
    /// exist; without one, the default path is used when it exists, and built-in defaults otherwise,
    /// unless `requireFile` is set.
    public static func load(explicitPath path: String?, requireFile: Bool = false) throws(GatewayFailure) -> GatewayConfig {
        if let path { return try load(path: path) }
        let defaultPath = GatewayConfig.defaultPath
        if !requireFile && !ConfigFiles.exists(defaultPath) {
            return GatewayConfig()
        }
        return try load(path: defaultPath)
    }

    /// Validates config text as if it were the file at `path` (relative paths resolve against its directory).
    public static func evaluate(bytes: [UInt8], path: String) -> (config: GatewayConfig, problems: [ConfigProblem]) {
        let known = Set(ConfigBuilder.schema.flatMap(\.keys))
        var builder = ConfigBuilder(document: ConfigParser.parse(bytes, knownKeys: known), baseDirectory: ConfigFiles.directory(of: path))
        var config = builder.build()
        config.path = path
        let problems = builder.problems.enumerated()
            .sorted { ($0.element.line, $0.offset) < ($1.element.line, $1.offset) }
            .map(\.element)
        return (config, problems)
    }

    /// The configuration at `path` (defaults where the file is silent) and every problem found.
    public static func evaluate(path: String) -> (config: GatewayConfig, problems: [ConfigProblem]) {
        switch FileContents.contents(of: path, limit: fileLimit) {
        case .failure(let error):
            var config = GatewayConfig()
            config.path = path
            return (config, [ConfigProblem(line: 0, message: "cannot read config file: \(error.text)")])
        case .success(let bytes):
            return evaluate(bytes: bytes, path: path)
        }
    }

    /// Advice that does not make the file invalid: an inline secret in a config file that every local
    /// user can read.
    public static func warnings(for config: GatewayConfig) -> [String] {
        guard let path = config.path, let info = ConfigFiles.info(path), info.mode & 0o004 != 0 else { return [] }
        var inline: [String] = []
        switch config.nightscout.credential {
        case .apiSecret(let s) where s.file == nil: inline.append("nightscout.api_secret")
        case .token(let s) where s.file == nil: inline.append("nightscout.token")
        default: break
        }
        if let token = config.fhir.bearerToken, token.file == nil { inline.append("fhir.bearer_token") }
        return inline.map {
            "\($0) is written in a file every local user can read (mode \(ConfigFiles.octal(info.mode))); "
                + "chmod 640 \(path), or move it to a secret file (mode 600)"
        }
    }

    /// The sections only uploads use: a problem in them does not stop the meter commands.
    public static let uploadSections: Set<String> = ["nightscout", "fhir", "mqtt", "network"]

    /// For the meter commands (`pair`, `scan`, `unpair`, `meters`, `readings`, `status`): problems
    /// confined to `[nightscout]`, `[fhir]` and `[network]` do not stop them. Those sections fall back to
    /// their defaults (disabled) and `warning` is one line naming the first problem; any other problem
    /// throws as `load` does.
    public static func loadIgnoringUploadProblems(explicitPath path: String?) throws(GatewayFailure) -> (config: GatewayConfig, warning: String?) {
        let file: String
        if let path {
            file = path
        } else {
            guard ConfigFiles.exists(GatewayConfig.defaultPath) else { return (GatewayConfig(), nil) }
            file = GatewayConfig.defaultPath
        }
        var (config, problems) = evaluate(path: file)
        guard let first = problems.first else { return (config, nil) }
        guard problems.allSatisfy({ $0.section.map(uploadSections.contains) ?? false }) else {
            throw failure(path: file, first: problems.first { !($0.section.map(uploadSections.contains) ?? false) } ?? first,
                          count: problems.count)
        }
        let sections = Set(problems.compactMap(\.section))
        if sections.contains("nightscout") { config.nightscout = NightscoutSection() }
        if sections.contains("fhir") { config.fhir = FHIRSection() }
        if sections.contains("mqtt") { config.mqtt = MQTTSection() }
        if sections.contains("network") { config.network = NetworkSection() }
        let names = ["nightscout", "fhir", "mqtt", "network"].filter(sections.contains).map { "[\($0)]" }.joined(separator: ", ")
        let location = first.line > 0 ? "\(file):\(first.line)" : file
        var warning = "\(location): \(first.message)"
        if problems.count > 1 { warning += " (and \(problems.count - 1) more)" }
        warning += "; \(names) ignored by this command (uploads need it fixed: glucose-gateway config check \(file))"
        return (config, warning)
    }

    static func failure(path: String, first: ConfigProblem, count: Int) -> GatewayFailure {
        let location = first.line > 0 ? "\(path):\(first.line)" : path
        var message = "\(location): \(first.message)"
        if count > 1 {
            message += " (and \(count - 1) more; run 'glucose-gateway config check \(path)')"
        }
        return GatewayFailure(.config, message)
    }
}

enum MQTTSectionNames {
    static let discoveryPrefix = "homeassistant"
}

/// Applies the schema to a parsed document, collecting problems.
struct ConfigBuilder {
    /// Known sections and their keys, in documentation order.
    static let schema: [(section: String, keys: [String])] = [
        ("gateway", [
            "database", "adapter", "log_level", "metrics_file", "time_zone", "clock_skew_correction",
            "clock_skew_threshold_s", "download_idle_timeout_s", "scan_mode", "future_tolerance_s", "set_meter_clock",
            "heartbeat_url", "heartbeat_api", "heartbeat_interval_s", "heartbeat_max_pending_s", "heartbeat_on_fail",
            "on_meter_error",
        ]),
        ("nightscout", [
            "enabled", "url", "api_secret", "api_secret_file", "token", "token_file", "ca_file", "api", "treatments", "units",
            "out_of_range_notes",
        ]),
        ("fhir", ["enabled", "base_url", "subject", "bearer_token", "bearer_token_file", "ca_file"]),
        ("mqtt", ["enabled", "url", "username", "password_file", "topic_prefix", "discovery", "ca_file"]),
        ("network", [
            "retry_count", "network_timeout_ms", "health_check_url", "recovery_mode", "error_bypass",
            "on_network_error",
        ]),
    ]

    private(set) var problems: [ConfigProblem]
    /// The section whose values are being built, for the problems found meanwhile.
    private var building: String?
    private var entries: [String: [String: ConfigEntry]] = [:]
    private var headerLines: [String: Int] = [:]
    private let baseDirectory: String

    init(document: ConfigDocument, baseDirectory: String) {
        self.problems = document.problems
        self.baseDirectory = baseDirectory
        let known = Dictionary(uniqueKeysWithValues: Self.schema.map { ($0.section, Set($0.keys)) })
        for header in document.headers {
            if known[header.name] == nil {
                problems.append(ConfigProblem(
                    line: header.line,
                    message: "unknown section" + Self.suggestion(header.name, among: Self.schema.map(\.section))
                        + " (sections: " + Self.schema.map { "[\($0.section)]" }.joined(separator: ", ") + ")"
                ))
            } else if let first = headerLines[header.name] {
                problems.append(ConfigProblem(line: header.line, message: "section [\(header.name)] is already defined on line \(first)",
                                              section: header.name))
            } else {
                headerLines[header.name] = header.line
            }
        }
        for entry in document.entries {
            guard let keys = known[entry.section] else { continue }  // reported with its header
            guard keys.contains(entry.key) else {
                let order = Self.schema.first { $0.section == entry.section }?.keys ?? []
                problems.append(ConfigProblem(
                    line: entry.line,
                    message: "unknown key in [\(entry.section)]" + Self.suggestion(entry.key, among: order),
                    section: entry.section
                ))
                continue
            }
            if let first = entries[entry.section]?[entry.key] {
                problems.append(ConfigProblem(line: entry.line, message: "duplicate key '\(entry.key)' in [\(entry.section)] (first set on line \(first.line))",
                                              section: entry.section))
                continue
            }
            entries[entry.section, default: [:]][entry.key] = entry
        }
    }

    mutating func build() -> GatewayConfig {
        var config = GatewayConfig()
        building = "gateway"
        buildGateway(&config.gateway)
        building = "nightscout"
        buildNightscout(&config.nightscout)
        building = "fhir"
        buildFHIR(&config.fhir)
        building = "mqtt"
        buildMQTT(&config.mqtt)
        building = "network"
        buildNetwork(&config.network, uploadURLs: [
            ("nightscout.url", config.nightscout.url), ("fhir.base_url", config.fhir.baseURL),
        ])
        return config
    }

    // MARK: sections

    private mutating func buildGateway(_ g: inout GatewaySection) {
        let s = "gateway"
        if let v = path(s, "database") { g.database = v.value }
        if let v = string(s, "adapter") {
            if Self.isAdapterName(v.value) { g.adapter = v.value } else {
                problem(v.line, "\(s).adapter: expected an adapter name such as \"hci0\" or an address such as \"00:1A:7D:DA:71:13\"")
            }
        }
        if let v = string(s, "log_level") {
            if let level = LogLevel.allCases.first(where: { $0.name == v.value }) { g.logLevel = level } else {
                problem(v.line, "\(s).log_level: expected one of error, warning, notice, info, debug")
            }
        }
        if let v = path(s, "metrics_file") {
            if let why = ConfigFiles.replaceableProblem(v.value) { problem(v.line, "\(s).metrics_file: \(why)") } else { g.metricsFile = v.value }
        }
        if let v = string(s, "time_zone") {
            if let message = Self.timeZoneProblem(v.value) { problem(v.line, "\(s).time_zone: \(message)") } else { g.timeZone = v.value }
        }
        if let v = bool(s, "clock_skew_correction") { g.clockSkewCorrection = v.value }
        if let v = integer(s, "clock_skew_threshold_s", in: GatewaySection.clockSkewThresholdRange) { g.clockSkewThresholdSeconds = v.value }
        if let v = bool(s, "set_meter_clock") { g.setMeterClock = v.value }
        if let v = integer(s, "future_tolerance_s", in: GatewaySection.futureToleranceRange) { g.futureToleranceSeconds = v.value }
        if let v = integer(s, "download_idle_timeout_s", in: GatewaySection.downloadIdleTimeoutRange) { g.downloadIdleTimeoutSeconds = v.value }
        if let v = string(s, "scan_mode") {
            if let mode = ScanMode(rawValue: v.value) { g.scanMode = mode } else {
                problem(v.line, "\(s).scan_mode: expected \"discovery\" or \"profile\"")
            }
        }
        buildHeartbeat(&g)
        if let command = command(s, "on_meter_error") { g.onMeterError = command }
    }

    /// The heartbeat keys. The URL is never echoed in a message: its path is the monitor's token.
    private mutating func buildHeartbeat(_ g: inout GatewaySection) {
        let s = "gateway"
        if let v = string(s, "heartbeat_url") {
            let withoutScheme = v.value.drop { $0 != "/" }
            if withoutScheme.contains("?") || withoutScheme.contains("#") {
                problem(v.line, "\(s).heartbeat_url: must not carry a query or fragment (for Uptime Kuma give the push URL up to its token, with heartbeat_api = \"uptime-kuma\"; the gateway adds status and msg)")
            } else {
                switch Self.normalizedHTTPURL(v.value) {
                case .success(let url): g.heartbeatURL = ConfigSecret(url)
                case .failure(let reason): problem(v.line, "\(s).heartbeat_url: \(reason.message)")
                }
            }
        }
        if let v = string(s, "heartbeat_api") {
            if let api = HeartbeatAPI(rawValue: v.value) { g.heartbeatAPI = api } else {
                problem(v.line, "\(s).heartbeat_api: expected \"healthchecks\" or \"uptime-kuma\"")
            }
        }
        if let v = integer(s, "heartbeat_interval_s", in: HeartbeatPolicy.intervalRange) { g.heartbeatIntervalSeconds = v.value }
        if let v = integer(s, "heartbeat_max_pending_s", in: HeartbeatPolicy.maxPendingRange) { g.heartbeatMaxPendingSeconds = v.value }
        if let v = string(s, "heartbeat_on_fail") {
            if let mode = HeartbeatFailMode(rawValue: v.value) { g.heartbeatOnFail = mode } else {
                problem(v.line, "\(s).heartbeat_on_fail: expected \"report\" or \"silent\"")
            }
        }
    }

    private mutating func buildNightscout(_ n: inout NightscoutSection) {
        let s = "nightscout"
        let enabled = bool(s, "enabled")
        let url = httpURL(s, "url")
        n.url = url?.value
        n.enabled = enabled?.value ?? (url != nil)
        n.caFile = certificateFile(s, "ca_file")
        if let v = bool(s, "treatments") { n.treatments = v.value }
        if let v = bool(s, "out_of_range_notes") { n.outOfRangeNotes = v.value }
        if let v = string(s, "units") {
            if let units = NightscoutSection.Units(rawValue: v.value) { n.units = units } else {
                problem(v.line, "\(s).units: expected \"mg/dl\" or \"mmol\"")
            }
        }

        // One credential at most: the first one set wins, others are errors.
        var credential: (key: String, line: Int)?
        let credentialEntries = ["api_secret", "api_secret_file", "token", "token_file"]
            .compactMap { entries[s]?[$0] }
            .sorted { $0.line < $1.line }
        for entry in credentialEntries {
            let key = entry.key
            if let first = credential {
                problem(entry.line, "\(s).\(key): set only one of api_secret, api_secret_file, token, token_file (\(first.key) is set on line \(first.line))")
                continue
            }
            let secret: ConfigSecret?
            if key.hasSuffix("_file") {
                secret = secretFile(s, key)
            } else {
                secret = inlineSecret(s, key)
            }
            credential = (key, entry.line)
            guard let secret else { continue }
            if key.hasPrefix("api_secret") && secret.value.count < 12 {
                problem(entry.line, "\(s).\(key): Nightscout API secrets are at least 12 characters long")
                continue
            }
            n.credential = key.hasPrefix("api_secret") ? .apiSecret(secret) : .token(secret)
        }
        if n.enabled {
            let line = enabled?.line ?? headerLines[s] ?? 0
            if entries[s]?["url"] == nil {
                problem(line, "\(s).url is required when [nightscout] is enabled")
            }
            if credential == nil {
                problem(line, "[nightscout] needs one of api_secret, api_secret_file, token or token_file")
            }
        }
        nightscoutAPI(&n, credential: credential?.key)
    }

    /// `api = "v1" | "v3"`; v3 authenticates with an access token only.
    private mutating func nightscoutAPI(_ n: inout NightscoutSection, credential: String?) {
        let s = "nightscout"
        guard let v = string(s, "api") else { return }
        guard v.value == "v1" || v.value == "v3" else {
            problem(v.line, "\(s).api: expected \"v1\" or \"v3\"")
            return
        }
        n.api = v.value
        if v.value == "v3", let credential, credential.hasPrefix("api_secret") {
            problem(v.line, "\(s).api = \"v3\" takes an access token (token or token_file), not \(credential)")
        }
    }

    private mutating func buildFHIR(_ f: inout FHIRSection) {
        let s = "fhir"
        let enabled = bool(s, "enabled")
        f.enabled = enabled?.value ?? false
        f.baseURL = httpURL(s, "base_url")?.value
        if let v = string(s, "subject") {
            if Self.isSubjectReference(v.value) { f.subject = v.value } else {
                problem(v.line, "\(s).subject: expected a reference such as \"Patient/123\" (Patient, Group, Device or Location; id of 1-64 letters, digits, '-' or '.')")
            }
        }
        f.caFile = certificateFile(s, "ca_file")
        if let inline = entries[s]?["bearer_token"], let file = entries[s]?["bearer_token_file"] {
            let later = inline.line > file.line ? inline : file
            let earlier = inline.line > file.line ? file : inline
            problem(later.line, "\(s).\(later.key): set only one of bearer_token, bearer_token_file (\(earlier.key) is set on line \(earlier.line))")
        } else if entries[s]?["bearer_token"] != nil {
            f.bearerToken = inlineSecret(s, "bearer_token")
        } else if entries[s]?["bearer_token_file"] != nil {
            f.bearerToken = secretFile(s, "bearer_token_file")
        }
        if f.enabled {
            let line = enabled?.line ?? headerLines[s] ?? 0
            if entries[s]?["base_url"] == nil { problem(line, "\(s).base_url is required when [fhir] is enabled") }
            if entries[s]?["subject"] == nil { problem(line, "\(s).subject is required when [fhir] is enabled") }
        }
    }

    private mutating func buildMQTT(_ m: inout MQTTSection) {
        let s = "mqtt"
        let enabled = bool(s, "enabled")
        if let v = string(s, "url") {
            switch Self.brokerURL(v.value) {
            case .success(let parts):
                m.tls = parts.tls
                m.host = parts.host
                m.port = parts.port
            case .failure(let reason):
                problem(v.line, "\(s).url: \(reason.message)")
            }
        }
        m.enabled = enabled?.value ?? (entries[s]?["url"] != nil)
        if let v = string(s, "username") {
            if let message = Self.secretProblem(v.value) { problem(v.line, "\(s).username: \(message)") } else { m.username = v.value }
        }
        // The password only from a file (mode 600), never written in the config itself.
        if let entry = entries[s]?["password_file"] {
            m.password = secretFile(s, "password_file")
            if entries[s]?["username"] == nil { problem(entry.line, "\(s).password_file: a password needs a username") }
        }
        if let v = string(s, "topic_prefix") {
            if let message = Self.topicPrefixProblem(v.value) { problem(v.line, "\(s).topic_prefix: \(message)") } else { m.topicPrefix = v.value }
        }
        if let v = bool(s, "discovery") { m.discovery = v.value }
        m.caFile = certificateFile(s, "ca_file")
        if m.caFile != nil, !m.tls, let line = entries[s]?["ca_file"]?.line, m.host != nil {
            problem(line, "\(s).ca_file: only used with an mqtts:// URL")
        }
        if m.enabled, entries[s]?["url"] == nil {
            problem(enabled?.line ?? headerLines[s] ?? 0, "\(s).url is required when [mqtt] is enabled")
        }
    }

    /// `mqtt://host[:port]` or `mqtts://host[:port]`, nothing after the authority but an optional `/`.
    static func brokerURL(_ text: String) -> Result<(tls: Bool, host: String, port: Int), URLProblem> {
        let lower = text.lowercased()
        let tls: Bool
        let rest: Substring
        if lower.hasPrefix("mqtts://") {
            tls = true
            rest = text.dropFirst(8)
        } else if lower.hasPrefix("mqtt://") {
            tls = false
            rest = text.dropFirst(7)
        } else {
            return .failure(URLProblem(message: "expected an mqtt:// or mqtts:// URL such as \"mqtt://broker.local:1883\""))
        }
        if text.unicodeScalars.contains(where: { $0.value <= 0x20 || $0.value == 0x7F }) {
            return .failure(URLProblem(message: "URL contains spaces or control characters"))
        }
        let authority = rest.prefix { $0 != "/" }
        let after = rest.dropFirst(authority.count)
        if authority.contains("@") {
            return .failure(URLProblem(message: "URL must not carry a user name or password (use username and password_file)"))
        }
        if !(after.isEmpty || after == "/") {
            return .failure(URLProblem(message: "URL must not carry a path, query or fragment (topics go in topic_prefix)"))
        }
        let parts: (host: Substring, port: Int?)
        switch splitAuthority(Substring(authority)) {
        case .success(let p): parts = p
        case .failure(let problem): return .failure(problem)
        }
        if let problem = hostProblem(parts.host) { return .failure(problem) }
        var host = String(parts.host).lowercased()
        if host.hasPrefix("[") { host = String(host.dropFirst().dropLast()) }
        return .success((tls, host, parts.port ?? (tls ? 8883 : 1883)))
    }

    /// Topic levels of letters, digits, `_`, `-` and `.`, separated by single `/`: no wildcard, no `$`
    /// start (broker-reserved), no empty level.
    static func topicPrefixProblem(_ text: String) -> String? {
        if text.utf8.count > 128 { return "longer than 128 bytes" }
        let levels = text.split(separator: "/", omittingEmptySubsequences: false)
        if levels.contains(where: \.isEmpty) { return "must not start or end with '/' or contain '//'" }
        let ok = text.unicodeScalars.allSatisfy {
            $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || "_-./".unicodeScalars.contains($0))
        }
        if !ok { return "expected topic levels of letters, digits, '_', '-' and '.' separated by '/' (no '+', '#' or spaces)" }
        if text == MQTTSectionNames.discoveryPrefix || text.hasPrefix(MQTTSectionNames.discoveryPrefix + "/") {
            return "must not be under \(MQTTSectionNames.discoveryPrefix)/, which holds the discovery configs"
        }
        return nil
    }

    private mutating func buildNetwork(_ n: inout NetworkSection, uploadURLs: [(key: String, url: String?)]) {
        let s = "network"
        if let v = integer(s, "retry_count", in: NetworkSection.retryCountRange) { n.retryCount = v.value }
        if let v = integer(s, "network_timeout_ms", in: NetworkSection.networkTimeoutRange) { n.networkTimeoutMilliseconds = v.value }
        if let v = httpURL(s, "health_check_url") {
            let origin = HTTPURL(v.value)?.origin
            if let clash = uploadURLs.first(where: { origin != nil && $0.url.flatMap { HTTPURL($0)?.origin } == origin }) {
                problem(v.line, "\(s).health_check_url: must not point at an upload server (same scheme, host and port as \(clash.key)); use a host that tells whether the network is up")
            } else {
                n.healthCheckURL = v.value
            }
        }
        if let v = bool(s, "recovery_mode") { n.recoveryMode = v.value }
        if let v = bool(s, "error_bypass") { n.errorBypass = v.value }
        if let command = command(s, "on_network_error") { n.onNetworkError = command }
    }

    /// An alert command (`on_network_error`, `on_meter_error`): a program path, or an array of strings whose
    /// first is an absolute path to an executable file.
    private mutating func command(_ s: String, _ key: String) -> [String]? {
        guard let entry = entries[s]?[key] else { return nil }
        let command: [String]
        switch entry.value {
        case .string(let text): command = [text]
        case .array(let items): command = items
        default:
            problem(entry.line, "\(s).\(key): expected a program path (string) or an array of strings, got \(entry.value.typeName)")
            return nil
        }
        guard let program = command.first, !program.isEmpty else {
            problem(entry.line, "\(s).\(key): the command is empty")
            return nil
        }
        guard program.hasPrefix("/") else {
            problem(entry.line, "\(s).\(key): the program must be an absolute path")
            return nil
        }
        guard ConfigFiles.isExecutable(program) else {
            problem(entry.line, "\(s).\(key): the program is not an executable file")
            return nil
        }
        return command
    }

    // MARK: typed getters (each reports a wrong type on the key's line)

    private mutating func problem(_ line: Int, _ message: String) {
        problems.append(ConfigProblem(line: line, message: ConfigParser.oneLine(message), section: building))
    }

    private mutating func string(_ section: String, _ key: String) -> (value: String, line: Int)? {
        guard let entry = entries[section]?[key] else { return nil }
        guard case .string(let text) = entry.value else {
            problem(entry.line, "\(section).\(key): expected a string, got \(entry.value.typeName)")
            return nil
        }
        guard !text.isEmpty else {
            problem(entry.line, "\(section).\(key): must not be empty (remove the line to use the default)")
            return nil
        }
        return (text, entry.line)
    }

    private mutating func bool(_ section: String, _ key: String) -> (value: Bool, line: Int)? {
        guard let entry = entries[section]?[key] else { return nil }
        guard case .boolean(let b) = entry.value else {
            problem(entry.line, "\(section).\(key): expected true or false, got \(entry.value.typeName)")
            return nil
        }
        return (b, entry.line)
    }

    private mutating func integer(_ section: String, _ key: String, in range: ClosedRange<Int>) -> (value: Int, line: Int)? {
        guard let entry = entries[section]?[key] else { return nil }
        guard case .integer(let i) = entry.value else {
            problem(entry.line, "\(section).\(key): expected an integer in \(range.lowerBound)..\(range.upperBound), got \(entry.value.typeName)")
            return nil
        }
        guard range.contains(i) else {
            problem(entry.line, "\(section).\(key): out of range \(range.lowerBound)..\(range.upperBound)")
            return nil
        }
        return (i, entry.line)
    }

    /// A file path, resolved against the config file's directory.
    private mutating func path(_ section: String, _ key: String) -> (value: String, line: Int)? {
        guard let v = string(section, key) else { return nil }
        return (ConfigFiles.resolve(v.value, relativeTo: baseDirectory), v.line)
    }

    /// A file path naming an existing regular file, with its line and its mode bits.
    private mutating func existingFile(_ section: String, _ key: String) -> (value: String, line: Int, info: ConfigFiles.Info)? {
        guard let v = path(section, key) else { return nil }
        let info: ConfigFiles.Info
        switch ConfigFiles.lookUp(v.value) {
        case .success(let found): info = found
        case .failure(let why):
            problem(v.line, "\(section).\(key): the file \(why.text)")
            return nil
        }
        guard info.isRegular else {
            problem(v.line, "\(section).\(key): the file is not a regular file")
            return nil
        }
        return (v.value, v.line, info)
    }

    /// A CA bundle: an existing regular file that holds at least one PEM certificate.
    private mutating func certificateFile(_ section: String, _ key: String) -> String? {
        guard let (path, line, _) = existingFile(section, key) else { return nil }
        switch FileContents.contents(of: path, limit: ConfigLoader.fileLimit * 8) {
        case .failure(let error):
            problem(line, "\(section).\(key): cannot read the file: \(error.text)")
            return nil
        case .success(let bytes):
            guard Self.holdsPEMCertificate(bytes) else {
                problem(line, "\(section).\(key): the file holds no PEM certificate (-----BEGIN CERTIFICATE----- ... -----END CERTIFICATE-----)")
                return nil
            }
            return path
        }
    }

    /// A `BEGIN CERTIFICATE` line followed by base64 and its `END CERTIFICATE` line.
    static func holdsPEMCertificate(_ bytes: [UInt8]) -> Bool {
        let begin = Array("-----BEGIN CERTIFICATE-----".utf8)
        let end = Array("-----END CERTIFICATE-----".utf8)
        func find(_ needle: [UInt8], from start: Int) -> Int? {
            guard bytes.count >= needle.count, start <= bytes.count - needle.count else { return nil }
            for i in start...(bytes.count - needle.count) where bytes[i] == needle[0] && Array(bytes[i..<(i + needle.count)]) == needle {
                return i
            }
            return nil
        }
        func isBase64(_ b: UInt8) -> Bool {
            (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || (b >= 0x30 && b <= 0x39) || b == 0x2B || b == 0x2F || b == 0x3D
        }
        func isSpace(_ b: UInt8) -> Bool { b == 0x20 || b == 0x09 || b == 0x0A || b == 0x0D }
        var from = 0
        while let b = find(begin, from: from) {
            let bodyStart = b + begin.count
            guard let e = find(end, from: bodyStart) else { return false }
            let body = bytes[bodyStart..<e].filter { !isSpace($0) }
            if body.count >= 16, body.allSatisfy(isBase64) { return true }
            from = e + end.count
        }
        return false
    }

    private mutating func httpURL(_ section: String, _ key: String) -> (value: String, line: Int)? {
        guard let v = string(section, key) else { return nil }
        switch Self.normalizedHTTPURL(v.value) {
        case .success(let url): return (url, v.line)
        case .failure(let reason):
            problem(v.line, "\(section).\(key): \(reason.message)")
            return nil
        }
    }

    private mutating func inlineSecret(_ section: String, _ key: String) -> ConfigSecret? {
        guard let entry = entries[section]?[key] else { return nil }
        guard case .string(let text) = entry.value else {
            problem(entry.line, "\(section).\(key): expected a string, got \(entry.value.typeName)")
            return nil
        }
        if let message = Self.secretProblem(text) {
            problem(entry.line, "\(section).\(key): \(message)")
            return nil
        }
        return ConfigSecret(text)
    }

    /// A secret file: must exist, be a regular file, and give no access to group or others.
    /// Trailing newlines are trimmed.
    private mutating func secretFile(_ section: String, _ key: String) -> ConfigSecret? {
        guard let v = existingFile(section, key) else { return nil }
        let name = "\(section).\(key)"
        guard v.info.mode & 0o077 == 0 else {
            problem(v.line, "\(name): the file is accessible by group or others (mode \(ConfigFiles.octal(v.info.mode))); chmod 600 it")
            return nil
        }
        switch FileContents.contents(of: v.value, limit: ConfigLoader.secretLimit) {
        case .failure(let error):
            problem(v.line, "\(name): cannot read the file: \(error.text)")
            return nil
        case .success(let bytes):
            var trimmed = bytes[...]
            while let last = trimmed.last, last == UInt8(ascii: "\n") || last == UInt8(ascii: "\r") {
                trimmed = trimmed.dropLast()
            }
            guard let text = String(validating: trimmed, as: UTF8.self) else {
                problem(v.line, "\(name): the file is not valid UTF-8 text")
                return nil
            }
            if let message = Self.secretProblem(text) {
                problem(v.line, "\(name): the secret in the file \(message)")
                return nil
            }
            return ConfigSecret(text, file: v.value)
        }
    }

    // MARK: value rules

    /// Never mentions the secret's text.
    static func secretProblem(_ text: String) -> String? {
        if text.isEmpty { return "must not be empty" }
        if text.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) {
            return "must be one line without control characters"
        }
        if text.first == " " || text.last == " " { return "must not start or end with a space" }
        return nil
    }

    static func isAdapterName(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        if text.hasPrefix("hci") {
            let digits = bytes.dropFirst(3)
            return !digits.isEmpty && digits.count <= 3 && digits.allSatisfy { $0 >= 0x30 && $0 <= 0x39 }
        }
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        return parts.count == 6 && parts.allSatisfy { $0.count == 2 && $0.allSatisfy(\.isHexDigit) }
    }

    static func isSubjectReference(_ text: String) -> Bool {
        let parts = text.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 2, ["Patient", "Group", "Device", "Location"].contains(String(parts[0])) else { return false }
        let id = parts[1]
        return (1...64).contains(id.count)
            && id.unicodeScalars.allSatisfy { ($0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0))) || $0 == "-" || $0 == "." }
    }

    static let zoneDirectory = "/usr/share/zoneinfo"

    /// An IANA name such as "Europe/Berlin"; checked against the zone database when one is installed.
    static func timeZoneProblem(_ name: String) -> String? {
        let allowed = name.unicodeScalars.allSatisfy {
            $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || "/_+-".unicodeScalars.contains($0))
        }
        guard allowed, !name.hasPrefix("/"), !name.split(separator: "/").contains("..") else {
            return "expected an IANA time zone name such as \"Europe/Berlin\""
        }
        if name == "UTC" { return nil }
        guard ConfigFiles.info(zoneDirectory)?.isDirectory == true else { return nil }
        guard ConfigFiles.info(zoneDirectory + "/" + name)?.isRegular == true else {
            return "unknown time zone (not in \(zoneDirectory))"
        }
        return nil
    }

    struct URLProblem: Error {
        var message: String
    }

    /// An `http` or `https` URL with a host, no credentials, query or fragment; the trailing slash dropped.
    static func normalizedHTTPURL(_ text: String) -> Result<String, URLProblem> {
        let lower = text.lowercased()
        let rest: Substring
        let scheme: String
        if lower.hasPrefix("https://") {
            scheme = "https"
            rest = text.dropFirst(8)
        } else if lower.hasPrefix("http://") {
            scheme = "http"
            rest = text.dropFirst(7)
        } else {
            return .failure(URLProblem(message: "expected an http:// or https:// URL"))
        }
        if text.unicodeScalars.contains(where: { $0.value <= 0x20 || $0.value == 0x7F }) {
            return .failure(URLProblem(message: "URL contains spaces or control characters"))
        }
        if rest.contains("?") || rest.contains("#") {
            return .failure(URLProblem(message: "URL must not carry a query or fragment (put credentials in token or api_secret)"))
        }
        let authority = rest.prefix { $0 != "/" }
        if authority.contains("@") {
            return .failure(URLProblem(message: "URL must not carry a user name or password (use the secret keys)"))
        }
        let hostPort: (host: Substring, port: Int?)
        switch splitAuthority(Substring(authority)) {
        case .success(let parts): hostPort = parts
        case .failure(let problem): return .failure(problem)
        }
        if let problem = hostProblem(hostPort.host) { return .failure(problem) }
        var path = rest.dropFirst(authority.count)
        while path.hasSuffix("/") { path = path.dropLast() }
        return .success(scheme + "://" + authority.lowercased() + path)
    }

    /// Host and port of an authority (`host`, `host:port`, `[v6]`, `[v6]:port`). A port is 1 to 5 ASCII
    /// digits in 1...65535: no sign, no spaces.
    static func splitAuthority(_ authority: Substring) -> Result<(host: Substring, port: Int?), URLProblem> {
        var host = authority
        var portText: Substring?
        if host.hasPrefix("[") {
            guard let close = host.firstIndex(of: "]") else { return .failure(URLProblem(message: "malformed IPv6 host in URL")) }
            let after = host[host.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { return .failure(URLProblem(message: "malformed IPv6 host in URL")) }
                portText = after.dropFirst()
            }
            host = host[...close]
        } else if let colon = host.firstIndex(of: ":") {
            portText = host[host.index(after: colon)...]
            host = host[..<colon]
        }
        var port: Int?
        if let text = portText {
            guard (1...5).contains(text.count), text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), let value = Int(text),
                  (1...65_535).contains(value) else {
                return .failure(URLProblem(message: "invalid port in URL (expected digits only, 1-65535)"))
            }
            port = value
        }
        if host.isEmpty || host == "[]" { return .failure(URLProblem(message: "URL has no host")) }
        return .success((host, port))
    }

    /// Why a host can never be reached as written, or nil. Names are ASCII (an internationalised name in
    /// its `xn--` form), without a trailing dot, in labels of letters, digits, `-` and `_`; a name that
    /// ends in a number must be an IPv4 address; `[...]` must hold an IPv6 address.
    static func hostProblem(_ host: Substring) -> URLProblem? {
        if host.hasPrefix("[") {
            let inner = String(host.dropFirst().dropLast())
            return ipv6(inner) == nil ? URLProblem(message: "malformed IPv6 host in URL") : nil
        }
        guard host.unicodeScalars.allSatisfy(\.isASCII) else {
            return URLProblem(message: "host name must be ASCII (write an internationalised name in its xn-- form)")
        }
        if host.hasSuffix(".") { return URLProblem(message: "host name must not end with a dot") }
        if ipv4(String(host)) != nil { return nil }
        let labels = host.split(separator: ".", omittingEmptySubsequences: false)
        if host.utf8.count > 253 || labels.contains(where: { $0.isEmpty || $0.utf8.count > 63 }) {
            return URLProblem(message: "malformed host name in URL (empty or over-long label)")
        }
        for label in labels {
            let ok = label.utf8.allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || ($0 | 0x20 >= 0x61 && $0 | 0x20 <= 0x7A) || $0 == 0x2D || $0 == 0x5F }
            if !ok || label.hasPrefix("-") || label.hasSuffix("-") {
                return URLProblem(message: "malformed host name in URL (letters, digits, '-' and '_' between dots)")
            }
        }
        if let last = labels.last, last.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) {
            return URLProblem(message: "host looks like an IPv4 address but is not one")
        }
        return nil
    }

    /// An IPv4 address in any form the resolver accepts (`127.1`, `0x7f.0.0.1`), in its dotted form.
    static func ipv4(_ text: String) -> String? {
        var address = in_addr()
        guard !text.isEmpty, inet_aton(text, &address) != 0 else { return nil }
        var buffer = [CChar](repeating: 0, count: Int(INET_ADDRSTRLEN))
        guard inet_ntop(AF_INET, &address, &buffer, socklen_t(buffer.count)) != nil else { return nil }
        return String(cString: buffer)
    }

    /// An IPv6 address in its compressed lower-case form.
    static func ipv6(_ text: String) -> String? {
        var address = in6_addr()
        guard inet_pton(AF_INET6, text, &address) == 1 else { return nil }
        var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        guard inet_ntop(AF_INET6, &address, &buffer, socklen_t(buffer.count)) != nil else { return nil }
        return String(cString: buffer)
    }

    /// " (did you mean 'x'?)" for a near miss.
    static func suggestion(_ word: String, among candidates: [String]) -> String {
        let best = candidates.map { ($0, editDistance(word, $0)) }.min { $0.1 < $1.1 }
        guard let best, best.1 <= 2 else { return "" }
        return " (did you mean '\(best.0)'?)"
    }

    static func editDistance(_ a: String, _ b: String) -> Int {
        let a = Array(a.utf8.prefix(64)), b = Array(b.utf8.prefix(64))
        if a.isEmpty { return b.count }
        if b.isEmpty { return a.count }
        var previous = Array(0...b.count)
        var current = [Int](repeating: 0, count: b.count + 1)
        for i in 1...a.count {
            current[0] = i
            for j in 1...b.count {
                current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
            }
            swap(&previous, &current)
        }
        return previous[b.count]
    }
}
