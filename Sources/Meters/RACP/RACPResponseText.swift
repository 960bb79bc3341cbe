import GlucoseProfile

extension RACPResponseCode {
    /// What the meter's answer means, in words a user can act on, with the specification's name in
    /// parentheses for a bug report (the bare code name, `op_code_not_supported`, says nothing to a user).
    var failureText: String {
        switch self {
        case .success: "the meter reported success"
        case .opCodeNotSupported: "the meter does not support this request (RACP op code not supported)"
        case .invalidOperator: "the meter did not understand which records were asked for (RACP invalid operator)"
        case .operatorNotSupported: "the meter cannot select records this way (RACP operator not supported)"
        case .invalidOperand: "the meter did not understand the range of records asked for (RACP invalid operand)"
        case .noRecordsFound: "the meter has no records to send (RACP no records found)"
        case .abortUnsuccessful: "the meter could not stop its running request (RACP abort unsuccessful)"
        case .procedureNotCompleted: "the meter stopped before sending every record (RACP procedure not completed)"
        case .operandNotSupported: "the meter cannot filter records by this value (RACP operand not supported)"
        default: "the meter answered with an unknown RACP response code \(rawValue)"
        }
    }
}
