"""ernie-image from Python: a ctypes binding over libernie-image.so and its C API (include/ernie_image.h).

    import ernie_image
    pipe = ernie_image.Pipeline("ERNIE-Image-Turbo", device="cuda")
    image = pipe("a cat on a windowsill", num_inference_steps=8, seed=42).images[0]
    image.save("cat.png")

Images come back as PIL.Image.Image (numpy arrays when PIL is missing), each with its seed and the request's
parameters in .info. Every failure of the library is an ErnieError carrying its message; bad arguments are
TypeError or ValueError raised here, before the library sees them.
"""

import ctypes
import os

from . import _capi

__all__ = ["Pipeline", "ErnieError", "ErnieCancelled", "ImageArray", "version"]

try:
    import PIL.Image as _pil
except ImportError:  # numpy arrays instead
    _pil = None
try:
    import numpy as _np
except ImportError:
    _np = None


class ErnieError(RuntimeError):
    """A failure the library reported: .status is the C ernie_status, str() its message."""

    def __init__(self, message, status=_capi.ERR_INTERNAL):
        super().__init__(message)
        self.status = status


class ErnieCancelled(ErnieError):
    """The progress callback asked to stop (returned True)."""


if _np is not None:
    class ImageArray(_np.ndarray):
        """An [H, W, 3] uint8 image with .info (seed, parameters), what Pipeline returns when PIL is missing."""

        def __array_finalize__(self, obj):
            self.info = dict(getattr(obj, "info", {}) or {})
else:
    ImageArray = None


class ImageList(list):
    """The images of one call; .images is the list itself, as diffusers' pipeline output."""

    @property
    def images(self):
        return self


def version(library=None):
    """The library's version string."""
    return _capi.load(library).ernie_version().decode()


def _text(value, name, allow_none=True):
    if value is None and allow_none:
        return None
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string, not {type(value).__name__}")
    if "\0" in value:
        raise ValueError(f"{name} must not contain NUL characters")
    return value.encode("utf-8")


def _int(value, name, lo=-2**31, hi=2**31 - 1):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an integer, not {type(value).__name__}")
    if not lo <= value <= hi:
        raise ValueError(f"{name} {value} is out of range [{lo}, {hi}]")
    return value


def _float(value, name):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, not {type(value).__name__}")
    if value != value or abs(value) > 3.0e38:
        raise ValueError(f"{name} {value} is not a finite number")
    return float(value)


def _check(lib, status, err):
    if status == _capi.OK:
        return
    msg = ctypes.string_at(err.value).decode("utf-8", "replace") if err.value else f"error {status}"
    if err.value:
        lib.ernie_free_string(err)
    raise (ErnieCancelled if status == _capi.ERR_CANCELLED else ErnieError)(msg, status)


def _pixels(image, name, allow_grey):
    """A PIL image, an [H, W, C] uint8 array (C 3 or 4; a mask also [H, W]) or a path -> (width, height, channels,
    bytes)."""
    if isinstance(image, (str, os.PathLike)):
        if _pil is None:
            raise TypeError(f"{name}: reading an image file needs PIL; pass a numpy array")
        with _pil.open(image) as f:
            image = f.copy()
    if _pil is not None and isinstance(image, _pil.Image):
        mode = "L" if allow_grey and image.mode in ("L", "1") else "RGBA" if "A" in image.getbands() else "RGB"
        image = image.convert(mode)
        return image.width, image.height, len(mode), image.tobytes()
    if _np is not None and isinstance(image, _np.ndarray):
        a = image[..., None] if image.ndim == 2 and allow_grey else image
        if a.ndim != 3 or a.shape[2] not in ((1, 3, 4) if allow_grey else (3, 4)):
            raise ValueError(f"{name}: an array of shape {image.shape}; expected [H, W, 3] or [H, W, 4]" +
                             (" (or [H, W])" if allow_grey else ""))
        if a.dtype != _np.uint8:
            raise TypeError(f"{name}: an array of {a.dtype}; expected uint8")
        return a.shape[1], a.shape[0], a.shape[2], _np.ascontiguousarray(a).tobytes()
    raise TypeError(f"{name} must be a PIL image, a numpy array or a path, not {type(image).__name__}")


def _c_image(image, name, allow_grey, keep):
    w, h, c, data = _pixels(image, name, allow_grey)
    buf = ctypes.create_string_buffer(data, len(data))
    keep.append(buf)
    img = _capi.Image(w, h, c, ctypes.cast(buf, ctypes.POINTER(ctypes.c_uint8)), 0)
    keep.append(img)
    return ctypes.pointer(img)


def _one(kwargs, names, default=None):
    """The value of whichever of `names` was given (diffusers' name first, then ours); two of them is an error."""
    given = [n for n in names if kwargs.get(n) is not None]
    if len(given) > 1:
        raise TypeError(f"give one of {' and '.join(given)}, not both")
    return kwargs[given[0]] if given else default


class Pipeline:
    """A loaded model. model: a diffusers-layout folder or a converted file (None with all four component files).
    device: "auto" (CUDA when there is a GPU), "cpu", "cuda", "cuda:N"; dtype: None (f32 on the CPU, bf16 on CUDA),
    "f32" or "bf16". The other keywords are the C API's options (docs/library.md); library: the path of
    libernie-image.so (else $ERNIE_IMAGE_LIBRARY, the build tree, then the loader's search)."""

    _OFFLOAD = {None: 0, "none": 1, "text-encoder": 2, "blocks": 3}
    _TILING = {None: 0, "auto": 0, "on": 1, "off": 2}
    _QUANT = {None: 0, "none": 0, "fp8": 1, "int8": 2}

    def __init__(self, model=None, device="auto", dtype=None, *, threads=0, load_pe=False, diffusion_model=None,
                 text_encoder=None, vae=None, tokenizer=None, lora_dir=None, offload=None, max_vram_gib=0.0,
                 vae_tiling=None, quantize=None, library=None):
        self._lib = None
        self._model = None
        lib = _capi.load(library)
        opt = _capi.initialized(lib, _capi.Options, "ernie_options_init")
        mem = _capi.initialized(lib, _capi.MemoryOptions, "ernie_memory_options_init")
        files = _capi.initialized(lib, _capi.ComponentFiles, "ernie_component_files_init")
        opt.model_dir = _text(model, "model")
        opt.device = _text(device, "device")
        opt.dtype = _text(dtype, "dtype")
        opt.threads = _int(threads, "threads", 0, 4096)
        opt.load_pe = 1 if load_pe else 0
        for key, table, value in (("offload", self._OFFLOAD, offload), ("vae_tiling", self._TILING, vae_tiling),
                                  ("quantize", self._QUANT, quantize)):
            if value not in table:
                raise ValueError(f"{key} {value!r} is unknown; use one of " +
                                 ", ".join(repr(k) for k in table if k is not None))
            setattr(mem, key, table[value])
        mem.max_vram_gib = _float(max_vram_gib, "max_vram_gib")
        for key, value in (("diffusion_model", diffusion_model), ("text_encoder", text_encoder), ("vae", vae),
                           ("tokenizer", tokenizer), ("lora_dir", lora_dir)):
            setattr(files, key, _text(value, key))
        handle, err = ctypes.c_void_p(), ctypes.c_void_p()
        _check(lib, lib.ernie_load_components(ctypes.byref(opt), ctypes.byref(mem), ctypes.byref(files),
                                              ctypes.byref(handle), ctypes.byref(err)), err)
        self._lib, self._model = lib, handle
        self.model, self.device = model, device

    def close(self):
        """Frees the model now (else when the object goes)."""
        if self._model:
            self._lib.ernie_free(self._model)
            self._model = None

    def __del__(self):
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def scale_factor(self):
        """Pixels per latent token: width and height must be multiples of it."""
        return self._lib.ernie_scale_factor(self._live())

    def _live(self):
        if not self._model:
            raise ErnieError("the pipeline is closed", _capi.ERR_INVALID)
        return self._model

    def __call__(self, prompt, negative_prompt=None, *, num_inference_steps=None, steps=None, guidance_scale=None,
                 cfg=None, seed=None, width=None, height=None, size=None, num_images_per_prompt=None, batch=None,
                 sampler=None, shift=None, rng=None, loras=None, image=None, mask_image=None, mask=None,
                 strength=None, mask_blur=0, composite=False, resize=False, use_pe=False, callback=None):
        """Generates images. The diffusers names and ours are both taken (num_inference_steps or steps,
        guidance_scale or cfg, num_images_per_prompt or batch, width/height or size=(w, h), mask_image or mask).
        seed: None or -1 random; loras: [path_or_name, (path_or_name, scale), ...]; image, mask: a PIL image, a
        uint8 array or a path; callback(phase, step, total, elapsed_s) -> True cancels (ErnieCancelled).
        Returns a list (also as .images) of PIL images or ImageArrays, each with .info["seed"] and
        .info["parameters"]."""
        model = self._live()
        kw = locals()
        steps = _one(kw, ("num_inference_steps", "steps"), 0)
        cfg = _one(kw, ("guidance_scale", "cfg"), -1.0)
        batch = _one(kw, ("num_images_per_prompt", "batch"), 1)
        mask = _one(kw, ("mask_image", "mask"))
        if size is not None and (width is not None or height is not None):
            raise TypeError("give size or width/height, not both")
        if size is not None:
            if not isinstance(size, (tuple, list)) or len(size) != 2:
                raise TypeError("size must be (width, height)")
            width, height = size
        lib, keep = self._lib, []
        req = _capi.initialized(lib, _capi.Request, "ernie_request_init")
        req.prompt = _text(prompt, "prompt", allow_none=False)
        req.negative_prompt = _text(negative_prompt, "negative_prompt")
        req.width = _int(width or 0, "width", 0, 65536)
        req.height = _int(height or 0, "height", 0, 65536)
        req.steps = _int(steps, "steps", 0, 100000)
        req.cfg = _float(cfg, "guidance_scale")
        if seed is None or (isinstance(seed, int) and seed == -1):
            req.seed = _capi.SEED_RANDOM
        else:
            req.seed = _int(seed, "seed", 0, _capi.SEED_RANDOM - 1)
        req.num_images = _int(batch, "num_images_per_prompt", 1, 1024)
        req.use_pe = 1 if use_pe else 0
        req.sampler = _text(sampler, "sampler")
        req.shift = _float(shift or 0.0, "shift")
        req.rng = _text(rng, "rng")
        if loras:
            if isinstance(loras, (str, os.PathLike)) or not hasattr(loras, "__iter__"):
                raise TypeError("loras must be a list of paths, names or (path_or_name, scale) pairs")
            arr = (_capi.Lora * len(loras))()
            for i, entry in enumerate(loras):
                ref, scale = entry if isinstance(entry, (tuple, list)) and len(entry) == 2 else (entry, 1.0)
                lib.ernie_lora_init(ctypes.byref(arr[i]))
                ref = _text(ref, f"loras[{i}]", allow_none=False)
                path_like = b"/" in ref or ref.endswith(b".safetensors")
                arr[i].path, arr[i].name = (ref, None) if path_like else (None, ref)
                arr[i].scale = _float(scale, f"loras[{i}] scale")
            keep.append(arr)
            req.loras, req.lora_count = arr, len(loras)
        if image is not None:
            req.init_image = _c_image(image, "image", False, keep)
        elif mask is not None:
            raise ValueError("a mask needs an image to inpaint (image=...)")
        if mask is not None:
            req.mask = _c_image(mask, "mask_image", True, keep)
        if strength is not None:
            req.strength = _float(strength, "strength")
        req.mask_blur = _int(mask_blur, "mask_blur", 0, 4096)
        req.composite, req.resize = int(bool(composite)), int(bool(resize))

        raised = []

        def progress(phase, step, total, elapsed, _user):
            if callback is None:
                return 0
            try:
                return 1 if callback(phase.decode(), step, total, elapsed) else 0
            except BaseException as e:  # noqa: BLE001 -- re-raised after the library returns
                raised.append(e)
                return 1

        fn = _capi.PROGRESS_FN(progress)
        out, count, err = ctypes.POINTER(_capi.Image)(), ctypes.c_int(), ctypes.c_void_p()
        status = lib.ernie_generate(model, ctypes.byref(req), fn, None, ctypes.byref(out), ctypes.byref(count),
                                    ctypes.byref(err))
        if raised:
            if err.value:
                lib.ernie_free_string(err)
            raise raised[0]
        _check(lib, status, err)
        try:
            params = {"prompt": prompt, "negative_prompt": negative_prompt or "", "num_inference_steps": steps or None,
                      "guidance_scale": None if cfg < 0 else cfg, "width": width, "height": height, "sampler": sampler,
                      "shift": shift, "rng": rng, "loras": list(loras or []), "strength": strength,
                      "img2img": image is not None, "inpaint": mask is not None}
            images = ImageList()
            for i in range(count.value):
                im = out[i]
                data = ctypes.string_at(im.data, im.width * im.height * im.channels)
                info = {"seed": im.seed, "parameters": dict(params, seed=im.seed, batch_index=i)}
                if _pil is not None:
                    pic = _pil.frombytes("RGB", (im.width, im.height), data)
                    pic.info.update(info)
                elif _np is not None:
                    pic = _np.frombuffer(data, dtype=_np.uint8).reshape(im.height, im.width, im.channels).copy()
                    pic = pic.view(ImageArray)
                    pic.info = info
                else:
                    raise ErnieError("neither PIL nor numpy is installed: no image type to return")
                images.append(pic)
            return images
        finally:
            lib.ernie_free_images(out, count.value)
