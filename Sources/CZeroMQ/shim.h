// Imports libzmq's C API into Swift. Debian's libzmq3-dev installs the header system-wide.
#include <zmq.h>
