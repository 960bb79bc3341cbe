/// The task executor a command's work prefers: the command line's one queue for every command but the
/// daemon, nil otherwise (Dispatch's threads). A task local, so a task started from within the command
/// with `Task(executorPreference: CommandExecutor.preferred)` keeps to the queue of the task that started
/// it: a plain `Task {}` would run on Dispatch's threads, and each value it hands over through a stream
/// would wake another thread.
public enum CommandExecutor {
    @TaskLocal public static var preferred: (any TaskExecutor)?
}
