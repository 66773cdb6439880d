/* The one source of libernie-image.so, which is otherwise the static library linked whole (CMakeLists.txt):
 * the public header compiled as C11, so building the shared library proves the header is plain C. */
#include <stddef.h>

#include "ernie_image.h"

/* struct_size comes first in every versioned struct: a library reads it before it knows the caller's layout. */
_Static_assert(offsetof(ernie_options, struct_size) == 0, "ernie_options.struct_size first");
_Static_assert(offsetof(ernie_memory_options, struct_size) == 0, "ernie_memory_options.struct_size first");
_Static_assert(offsetof(ernie_component_files, struct_size) == 0, "ernie_component_files.struct_size first");
_Static_assert(offsetof(ernie_lora, struct_size) == 0, "ernie_lora.struct_size first");
_Static_assert(offsetof(ernie_request, struct_size) == 0, "ernie_request.struct_size first");
