"""The C API of include/ernie_image.h through ctypes: the structs, the prototypes, and finding the library."""

import ctypes
import ctypes.util
import os

c_char_p, c_int, c_float, c_double, c_size_t, c_uint64 = (
    ctypes.c_char_p, ctypes.c_int, ctypes.c_float, ctypes.c_double, ctypes.c_size_t, ctypes.c_uint64)

SEED_RANDOM = 2**64 - 1
OK, ERR_INVALID, ERR_OOM, ERR_CANCELLED, ERR_INTERNAL = 0, 1, 2, 3, 4


class Options(ctypes.Structure):
    _fields_ = [("struct_size", c_size_t), ("model_dir", c_char_p), ("device", c_char_p), ("dtype", c_char_p),
                ("threads", c_int), ("keep_text_encoder", c_int), ("load_pe", c_int), ("gpus", c_char_p),
                ("parallel", c_char_p)]


class MemoryOptions(ctypes.Structure):
    _fields_ = [("struct_size", c_size_t), ("offload", c_int), ("max_vram_gib", c_double), ("vae_tiling", c_int),
                ("vae_tile", c_int), ("quantize", c_int), ("attention_fp8", c_int), ("lora_at_runtime", c_int)]


class ComponentFiles(ctypes.Structure):
    _fields_ = [("struct_size", c_size_t), ("diffusion_model", c_char_p), ("text_encoder", c_char_p),
                ("vae", c_char_p), ("tokenizer", c_char_p), ("lora_dir", c_char_p)]


class Lora(ctypes.Structure):
    _fields_ = [("struct_size", c_size_t), ("path", c_char_p), ("name", c_char_p), ("scale", c_float)]


class Image(ctypes.Structure):
    _fields_ = [("width", c_int), ("height", c_int), ("channels", c_int), ("data", ctypes.POINTER(ctypes.c_uint8)),
                ("seed", c_uint64)]


class Request(ctypes.Structure):
    _fields_ = [("struct_size", c_size_t), ("prompt", c_char_p), ("negative_prompt", c_char_p), ("width", c_int),
                ("height", c_int), ("steps", c_int), ("cfg", c_float), ("seed", c_uint64), ("num_images", c_int),
                ("use_pe", c_int), ("init_latents", ctypes.POINTER(c_float)), ("init_latents_count", c_size_t),
                ("sampler", c_char_p), ("shift", c_float), ("rng", c_char_p), ("loras", ctypes.POINTER(Lora)),
                ("lora_count", c_int), ("init_image", ctypes.POINTER(Image)), ("strength", c_float),
                ("mask", ctypes.POINTER(Image)), ("mask_blur", c_int), ("composite", c_int), ("resize", c_int)]


PROGRESS_FN = ctypes.CFUNCTYPE(c_int, c_char_p, c_int, c_int, c_double, ctypes.c_void_p)
_ERR = ctypes.POINTER(ctypes.c_void_p)  # char**: the message, freed with ernie_free_string


def _candidates(path):
    """Where the library may be, in order: the argument, $ERNIE_IMAGE_LIBRARY, the build tree this package was
    copied from, beside the package, then the dynamic loader's search (an installed libernie-image.so.0)."""
    if path:
        return [os.fspath(path)]
    if os.environ.get("ERNIE_IMAGE_LIBRARY"):
        return [os.environ["ERNIE_IMAGE_LIBRARY"]]
    out = []
    try:
        from . import _build_tree  # written by CMake into the build tree's copy of the package
        out.append(_build_tree.LIBRARY)
    except ImportError:
        pass
    out.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "libernie-image.so.0"))
    out.append(ctypes.util.find_library("ernie-image") or "libernie-image.so.0")
    return out


_loaded = {}


def load(path=None):
    """The library as a ctypes.CDLL with its prototypes set; raises OSError naming where it looked."""
    tried = []
    for cand in _candidates(path):
        if cand in _loaded:
            return _loaded[cand]
        if os.sep in cand and not os.path.exists(cand):
            tried.append(cand + " (no such file)")
            continue
        try:
            lib = ctypes.CDLL(cand)
        except OSError as e:
            tried.append(f"{cand} ({e})")
            continue
        _prototypes(lib)
        _loaded[cand] = lib
        return lib
    raise OSError("libernie-image.so.0 not found; tried: " + "; ".join(tried) +
                  ". Pass library=PATH or set ERNIE_IMAGE_LIBRARY")


def _prototypes(lib):
    P = ctypes.POINTER
    for name, args, res in [
        ("ernie_options_init", [P(Options)], None),
        ("ernie_request_init", [P(Request)], None),
        ("ernie_memory_options_init", [P(MemoryOptions)], None),
        ("ernie_component_files_init", [P(ComponentFiles)], None),
        ("ernie_lora_init", [P(Lora)], None),
        ("ernie_load_components", [P(Options), P(MemoryOptions), P(ComponentFiles), P(ctypes.c_void_p), _ERR], c_int),
        ("ernie_generate", [ctypes.c_void_p, P(Request), PROGRESS_FN, ctypes.c_void_p, P(P(Image)), P(c_int), _ERR],
         c_int),
        ("ernie_scale_factor", [ctypes.c_void_p], c_int),
        ("ernie_free_images", [P(Image), c_int], None),
        ("ernie_free", [ctypes.c_void_p], None),
        ("ernie_free_string", [ctypes.c_void_p], None),
        ("ernie_version", [], c_char_p),
    ]:
        f = getattr(lib, name)
        f.argtypes, f.restype = args, res


def initialized(lib, cls, init):
    """A struct set up by its ernie_*_init, refused when the library's size of it differs from ours (another
    version of the header): a mismatched layout would read the wrong fields."""
    s = cls()
    getattr(lib, init)(ctypes.byref(s))
    if s.struct_size != ctypes.sizeof(cls):
        raise OSError(f"{init}: the library's struct is {s.struct_size} bytes, this binding's {ctypes.sizeof(cls)}; "
                      "use the ernie_image package of the same version as the library")
    return s
