import Dispatch
import GatewayCore
import Glibc
import Support
import Synchronization

/// What `pair` answers when the meter's pairing method needs a person: the six digits of numeric
/// comparison, or digits to type on the meter. Digits go to the terminal only, never to a log.
enum PairingQuestions {
    /// A person can be asked: standard input and standard error are both a terminal.
    static var atTerminal: Bool { isatty(0) == 1 && isatty(2) == 1 }

    /// The answers for `pair`.
    ///
    /// Numeric comparison: on a terminal the person is asked whether the meter shows the same six
    /// digits. Without one, `--confirm` prints the digits and accepts them, and otherwise the pairing is
    /// refused: accepting unseen digits would make it Just Works in disguise, and a pairing that gets
    /// stuck waiting for a person who is not there only ends after bluetoothd's 60 s. The digits are no
    /// secret (both screens show them, and they reveal nothing of the keys), so printing them is safe;
    /// the meter's own Yes button still protects the pairing when the person there compares.
    /// A passkey to type on the meter is shown on a terminal only: it is a secret until the pairing ends.
    static func input(passkey: UInt32?, confirm: Bool, terminal: Bool) -> PairingInput {
        var input = PairingInput(passkey: passkey)
        if confirm {
            input.confirmNumbers = { digits in
                StandardStream.writeOutput("numeric comparison: the meter should show \(sixDigits(digits)); accepted here (--confirm): confirm on the meter only if it shows the same\n")
                return true
            }
        } else if terminal {
            input.confirmNumbers = { digits in
                StandardStream.writeError("numeric comparison: does the meter show \(sixDigits(digits))? If it does, confirm on the meter too. [y/N] ")
                let answer = await readAnswer()
                return answer.map { $0.lowercased() == "y" || $0.lowercased() == "yes" } ?? false
            }
        }
        if terminal {
            input.showPasskey = { digits in
                StandardStream.writeError("type \(sixDigits(digits)) on the meter, then confirm there\n")
            }
        }
        return input
    }

    /// Six digits with leading zeros, as both screens show them.
    static func sixDigits(_ value: UInt32) -> String {
        let digits = String(value % 1_000_000)
        return String(repeating: "0", count: max(0, 6 - digits.count)) + digits
    }

    /// One line from standard input, trimmed; nil at its end or when the pairing ended first (the task is
    /// cancelled). The read blocks, so it runs on a thread of its own, not on the concurrency pool.
    private static func readAnswer() async -> String? {
        let once = Mutex<CheckedContinuation<String?, Never>?>(nil)
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<String?, Never>) in
                once.withLock { $0 = continuation }
                if Task.isCancelled { once.withLock { $0.take() }?.resume(returning: nil) }
                DispatchQueue.global().async {
                    let line = Swift.readLine(strippingNewline: true)
                    once.withLock { $0.take() }?.resume(returning: line.map { String($0.filter { !$0.isWhitespace }) })
                }
            }
        } onCancel: {
            once.withLock { $0.take() }?.resume(returning: nil)
        }
    }
}
