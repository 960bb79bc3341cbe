/// A credential read from the config (Nightscout API secret or token, FHIR bearer token, MQTT password,
/// heartbeat URL). Its text is reachable only through `value`; printing, interpolating, dumping or
/// mirroring it shows `<redacted>`, so it cannot leak into a log line, `status` or an error message.
public struct Secret: Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    public let value: String
    /// Where it came from: `file` is the secret file's path, nil when written inline in the config.
    public let file: String?

    public init(_ value: String) {
        self.init(value, file: nil)
    }

    public init(_ value: String, file: String?) {
        self.value = value
        self.file = file
    }

    public var description: String { "<redacted>" }
    public var debugDescription: String { "<redacted>" }
    public var customMirror: Mirror { Mirror(self, children: [:]) }

    /// `(set)` or `(set, from FILE)`: what status output may say about a secret.
    public var summary: String { file.map { "(set, from \($0))" } ?? "(set)" }
}
