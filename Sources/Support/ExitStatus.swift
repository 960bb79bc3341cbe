/// Process exit statuses, following sysexits(3). Every command maps its outcome to one of these.
public struct ExitStatus: RawRepresentable, Hashable, Sendable {
    public var rawValue: Int32
    public init(rawValue: Int32) { self.rawValue = rawValue }

    public static let ok = ExitStatus(rawValue: 0)
    public static let failure = ExitStatus(rawValue: 1)
    /// Bad command line.
    public static let usage = ExitStatus(rawValue: 64)
    /// Malformed data (a capture, a file, a meter's bytes).
    public static let dataError = ExitStatus(rawValue: 65)
    /// Meter or adapter unavailable.
    public static let unavailable = ExitStatus(rawValue: 69)
    /// Readings are stored but their upload was deferred.
    public static let tempFail = ExitStatus(rawValue: 75)
    /// Configuration error.
    public static let config = ExitStatus(rawValue: 78)
}

/// An error that a command reports to the user as one line on stderr, with an exit status.
/// The message must never contain a secret or a health value.
public struct GatewayFailure: Error, CustomStringConvertible, Sendable {
    public var status: ExitStatus
    public var message: String
    public init(_ status: ExitStatus, _ message: String) {
        self.status = status
        self.message = message
    }
    public var description: String { message }
}
