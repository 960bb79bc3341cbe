#ifndef GLUCOSE_GATEWAY_PACKET_SOCKET_H
#define GLUCOSE_GATEWAY_PACKET_SOCKET_H

#include <stddef.h>

/// The most packets one call takes.
#define GG_PACKETS_PER_CALL 64

/// Takes up to `count` packets (at most GG_PACKETS_PER_CALL) waiting on the SOCK_SEQPACKET socket `fd` in
/// one system call (recvmmsg with MSG_DONTWAIT), without waiting for any: packet i goes to
/// buffer + i * slot, at most `slot` bytes of it; lengths[i] is its length, the whole length where it was
/// longer than `slot`, and truncated[i] is then 1. A zero length is an empty packet or the end of the
/// stream. Returns how many packets were taken, or -1 with errno set (EAGAIN: none was waiting).
int gg_receive_packets(int fd, unsigned char *buffer, size_t slot, unsigned int count, size_t *lengths,
                       unsigned char *truncated);

#endif
