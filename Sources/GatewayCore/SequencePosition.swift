/// Where a meter's 16-bit sequence counter stands, as the gateway tracks it: the number of the newest
/// record downloaded, which wraps from 65535 to 0 like the counter itself.
///
/// A meter's sequence numbers are uint16 and its counter wraps. After 65535 comes 0, so the newest record
/// is not the one with the largest number: positions are compared by serial number arithmetic (RFC 1982),
/// where `a` comes after `b` when it is 1 to 32767 steps ahead of it, going round. No meter holds more than
/// a few thousand records, so two numbers a meter holds at once are never half the range apart.
///
/// -1 is a position too: "nothing is known yet, ask from sequence 0"; every number comes after it.
public enum SequencePosition {
    /// Numbers a meter can have made after a position: the next `window` numbers, going round.
    public static let window = 32_767

    /// Whether `sequence` comes after `position` in the counter's order (nil or negative: always).
    public static func comes(_ sequence: Int, after position: Int?) -> Bool {
        guard let position, position >= 0 else { return true }
        let steps = (sequence &- position) & 0xFFFF
        return steps >= 1 && steps <= window
    }

    /// The position after a record numbered `sequence` was downloaded at `position`: the later of the two.
    public static func advanced(_ position: Int?, by sequence: Int) -> Int {
        comes(sequence, after: position) ? sequence : (position ?? sequence)
    }

    /// Whether a stored position is one a 16-bit counter can have (-1 included); any other value (a
    /// damaged database) is treated as unknown.
    public static func isValid(_ position: Int) -> Bool { position >= -1 && position <= 0xFFFF }
}
