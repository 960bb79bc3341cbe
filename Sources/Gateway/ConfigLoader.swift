import GatewayCore
import Meters
import Support
import SyncEngine
import Transport

/// Reads the config file and hands each section to the layer that owns it.
///
/// The file's syntax is read by `ConfigParser`; `ConfigSections` refuses unknown sections and keys; each
/// owner then reads and checks its own keys once: `GatewaySection` (the daemon, with `MeterDownloadConfig`
/// and `HeartbeatSettings`), and the sync engine's `NightscoutSection`, `FHIRSection`, `MQTTSection` and
/// `NetworkSection`. `check(path:)` returns every problem with its line; `load(path:)` returns the typed
/// configuration or throws a one-line `GatewayFailure` with exit status 78. Relative paths in the file are
/// taken relative to the file's directory. Secrets never appear in any problem message.
public enum ConfigLoader {
    /// Larger config files are refused (a config is a few kilobytes).
    static let fileLimit = 1 << 20

    /// Known sections and their keys, in documentation order, each list from the section's owner.
    static let schema: ConfigSections.Schema = [
        (GatewaySection.name, GatewaySection.keys + MeterDownloadConfig.keys + HeartbeatSettings.keys),
        (NightscoutSection.name, NightscoutSection.keys),
        (FHIRSection.name, FHIRSection.keys),
        (MQTTSection.name, MQTTSection.keys),
        (NetworkSection.name, NetworkSection.keys),
    ]

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
        let known = Set(schema.flatMap(\.keys))
        let sections = ConfigSections(document: ConfigParser.parse(bytes, knownKeys: known), schema: schema,
                                      baseDirectory: ConfigFiles.directory(of: path))
        var problems = sections.problems
        var config = GatewayConfig()
        config.path = path
        func read<Section>(_ name: String, _ owner: (inout ConfigSection) -> Section) -> Section {
            var section = sections.section(name)
            defer { problems += section.problems }
            return owner(&section)
        }
        config.gateway = read(GatewaySection.name) { GatewaySection(section: &$0) }
        config.nightscout = read(NightscoutSection.name) { NightscoutSection(section: &$0) }
        config.fhir = read(FHIRSection.name) { FHIRSection(section: &$0) }
        config.mqtt = read(MQTTSection.name) { MQTTSection(section: &$0) }
        let uploadURLs = [("nightscout.url", config.nightscout.url), ("fhir.base_url", config.fhir.baseURL)]
        config.network = read(NetworkSection.name) { NetworkSection(section: &$0, uploadURLs: uploadURLs) }
        let sorted = problems.enumerated()
            .sorted { ($0.element.line, $0.offset) < ($1.element.line, $1.offset) }
            .map(\.element)
        return (config, sorted)
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
        let inline = config.nightscout.inlineSecretKeys + config.fhir.inlineSecretKeys
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
