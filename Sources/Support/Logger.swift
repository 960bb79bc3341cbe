#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Synchronization

/// Severity, with the syslog priority that journald reads from a `<N>` prefix on stderr.
public enum LogLevel: Int, Comparable, Sendable, CaseIterable {
    case error = 3
    case warning = 4
    case notice = 5
    case info = 6
    case debug = 7

    public static func < (lhs: LogLevel, rhs: LogLevel) -> Bool { lhs.rawValue > rhs.rawValue }

    public var name: String {
        switch self {
        case .error: "error"
        case .warning: "warning"
        case .notice: "notice"
        case .info: "info"
        case .debug: "debug"
        }
    }
}

/// Where log lines go. Libraries receive a `Logger` and never create their own sink.
public protocol LogSink: Sendable {
    func write(level: LogLevel, label: String, message: String)
}

/// A small structured logger passed into every library. Messages must not contain secrets.
public struct Logger: Sendable {
    public var label: String
    public var minimumLevel: LogLevel
    public var sink: any LogSink

    public init(label: String, minimumLevel: LogLevel = .info, sink: any LogSink = StderrLogSink()) {
        self.label = label
        self.minimumLevel = minimumLevel
        self.sink = sink
    }

    /// A logger that writes nothing.
    public static let silent = Logger(label: "silent", minimumLevel: .error, sink: NullLogSink())

    public func with(label: String) -> Logger {
        var copy = self
        copy.label = label
        return copy
    }

    public func log(_ level: LogLevel, _ message: @autoclosure () -> String) {
        guard level >= minimumLevel else { return }
        sink.write(level: level, label: label, message: message())
    }

    public func error(_ message: @autoclosure () -> String) { log(.error, message()) }
    public func warning(_ message: @autoclosure () -> String) { log(.warning, message()) }
    public func notice(_ message: @autoclosure () -> String) { log(.notice, message()) }
    public func info(_ message: @autoclosure () -> String) { log(.info, message()) }
    public func debug(_ message: @autoclosure () -> String) { log(.debug, message()) }
}

/// Writes `<priority>label: message` lines to stderr, which journald turns into priorities.
public struct StderrLogSink: LogSink {
    public var journalPrefix: Bool
    public init(journalPrefix: Bool = true) { self.journalPrefix = journalPrefix }

    public func write(level: LogLevel, label: String, message: String) {
        // Messages carry text from outside (meter names, server answers): never a raw control character.
        let flat = TerminalText.escaped(message)
        let line = journalPrefix ? "<\(level.rawValue)>\(label): \(flat)\n" : "\(label): \(level.name): \(flat)\n"
        StandardStream.writeError(line)
    }
}

public struct NullLogSink: LogSink {
    public init() {}
    public func write(level: LogLevel, label: String, message: String) {}
}

/// Keeps log lines in memory, for tests.
public final class MemoryLogSink: LogSink {
    private let lines = Mutex<[String]>([])
    public init() {}
    public func write(level: LogLevel, label: String, message: String) {
        lines.withLock { $0.append("\(level.name) \(label): \(message)") }
    }
    public var entries: [String] { lines.withLock { $0 } }
}
