/// A member of a JSON document that could not be used: where it is (`events[3].value`, empty for the
/// document as a whole) and what is wrong with it, told in one line.
public struct JSONFieldError: Error, Sendable, Equatable, CustomStringConvertible {
    public var field: String
    public var message: String
    public init(_ field: String, _ message: String) {
        self.field = field
        self.message = message
    }
    public var description: String { field.isEmpty ? message : "\(field): \(message)" }
}
