// recvmmsg and struct mmsghdr are GNU extensions that the C headers show only with _GNU_SOURCE, which the
// Swift importer's view of the C library does not define: this file defines it and wraps the one call.
#define _GNU_SOURCE
#include "packet_socket.h"

#include <string.h>
#include <sys/socket.h>

int gg_receive_packets(int fd, unsigned char *buffer, size_t slot, unsigned int count, size_t *lengths,
                       unsigned char *truncated) {
    struct mmsghdr messages[GG_PACKETS_PER_CALL];
    struct iovec vectors[GG_PACKETS_PER_CALL];
    if (count > GG_PACKETS_PER_CALL) count = GG_PACKETS_PER_CALL;
    memset(messages, 0, sizeof(messages[0]) * count);
    for (unsigned int i = 0; i < count; i++) {
        vectors[i].iov_base = buffer + (size_t)i * slot;
        vectors[i].iov_len = slot;
        messages[i].msg_hdr.msg_iov = &vectors[i];
        messages[i].msg_hdr.msg_iovlen = 1;
    }
    int taken = recvmmsg(fd, messages, count, MSG_DONTWAIT | MSG_TRUNC, NULL);
    for (int i = 0; i < taken; i++) {
        lengths[i] = messages[i].msg_len;
        truncated[i] = (messages[i].msg_hdr.msg_flags & MSG_TRUNC) != 0;
    }
    return taken;
}
