/// A credential read from the config. Its description never shows the value, so it cannot leak into a
/// log line, `status` or an error message by interpolation.
public struct Secret: Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible {
    public let value: String
    public init(_ value: String) { self.value = value }
    public var description: String { "<redacted>" }
    public var debugDescription: String { "<redacted>" }
}
