import EnlargerProtocol
import ZeroMQ

// ZeroMQ cannot know the protocol module and the protocol module must not depend on ZeroMQ,
// so the conformance that lets the framing code read received messages in place lives here.
extension Message: FrameBytes {}
