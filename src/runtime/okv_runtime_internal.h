/* okv_runtime_internal.h — what the runtime's files share and the public
 * API hides: the program behind the opaque okv_program handle. */
#ifndef OKV_RUNTIME_INTERNAL_H
#define OKV_RUNTIME_INTERNAL_H

#include "okv_format.h"

struct okv_program {
    okv_program_file *pf;
    int n_x8; /* block matrices packed x8 at open (okv_format_pack_x8) */
};

#endif
