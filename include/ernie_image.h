/* ernie-image C API: load an ERNIE-Image model folder, generate images, free them.
 *
 * Errors are values: every function that can fail returns an ernie_status and, when `err` is not NULL,
 * stores a message in *err (free it with ernie_free_string). The message of the last failure on the calling
 * thread is also available from ernie_last_error(). No C++ exception crosses this boundary.
 *
 *   ernie_options opt; ernie_options_init(&opt); opt.model_dir = "ERNIE-Image-Turbo";
 *   ernie_model* m; char* err;
 *   if (ernie_load(&opt, &m, &err) != ERNIE_OK) { fprintf(stderr, "%s\n", err); ernie_free_string(err); }
 *   ernie_request r; ernie_request_init(&r); r.prompt = "a cat";
 *   ernie_image* imgs; int n;
 *   if (ernie_generate(m, &r, NULL, NULL, &imgs, &n, &err) == ERNIE_OK) { ...; ernie_free_images(imgs, n); }
 *   ernie_free(m);
 *
 * Low-VRAM modes and VAE tiling: ernie_memory_options mem; ernie_memory_options_init(&mem);
 *   mem.offload = ERNIE_OFFLOAD_TEXT_ENCODER; (or mem.max_vram_gib = 12;) ernie_load_ex(&opt, &mem, &m, &err);
 *
 * Versions (the ABI of libernie-image.so.0; docs/library.md): every option struct begins with struct_size, which
 * its ernie_*_init function sets (always start from it). Later versions only append fields; the library takes
 * the sizes of its own and earlier versions and refuses any other with ERNIE_ERR_INVALID naming the struct.
 * ernie_image has no size and never changes within this SONAME.
 *
 * Threads. Any function may be called from any thread; no global set-up is needed.
 *  - One model handle: ernie_generate and ernie_encode_prompt may be called from several threads at once; a lock
 *    inside the model runs them one after another (each gives what it would give alone). ernie_scale_factor and
 *    ernie_model_offload may be called at any time. ernie_free must not overlap any other call on that handle.
 *  - Different handles are independent and may run at the same time. They share process-wide state: on the CPU,
 *    ernie_options.threads sets OpenBLAS's thread count for the process (and OpenMP's for the loading thread:
 *    set OMP_NUM_THREADS to fix it for every thread); on CUDA, all work on one GPU goes through one stream, so
 *    handles on the same GPU take turns, and share its memory and the max_vram_gib cap.
 *  - The progress callback runs on the thread that called ernie_generate, before the call returns, while the
 *    handle's lock is held: it must not call ernie_generate, ernie_encode_prompt or ernie_free on that handle.
 *  - ernie_last_error is per thread. Request strings and buffers are read during the call only.
 */
#ifndef ERNIE_IMAGE_H
#define ERNIE_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ernie_status {
  ERNIE_OK = 0,
  ERNIE_ERR_INVALID = 1,   /* bad argument, request or model files */
  ERNIE_ERR_OOM = 2,       /* out of host or device memory */
  ERNIE_ERR_CANCELLED = 3, /* the progress callback asked to stop */
  ERNIE_ERR_INTERNAL = 4
} ernie_status;

typedef struct ernie_model ernie_model;

typedef struct ernie_options {
  size_t struct_size;    /* sizeof(ernie_options), set by ernie_options_init (always start from it); later versions
                            only append fields, and options of an earlier size stay accepted */
  const char* model_dir; /* diffusers-layout folder (required) */
  const char* device;    /* "cpu" (default), "cuda", "cuda:N" */
  const char* dtype;     /* NULL: f32 on the CPU, bf16 on CUDA; or "f32", "bf16" */
  int threads;           /* CPU threads, 0 = all cores */
  int keep_text_encoder; /* 1 (default): keep it loaded between requests; 0: ERNIE_OFFLOAD_TEXT_ENCODER (below) */
  int load_pe;           /* 1: load the prompt enhancer (pe/) */
  /* Several GPUs in one host (`--gpus`, `--parallel`), added in the second version of this struct (a first-version
     struct, without them, is still accepted). NULL: one device (`device`). */
  const char* gpus;      /* "0,1": the CUDA devices, one rank each (NCCL); the first runs the text encoder and VAE */
  const char* parallel;  /* "none" (NULL), "cfg": the unconditional and conditional rows on two GPUs (a request at
                            cfg <= 1 runs on the first alone), "ulysses": each DiT forward's tokens split over the GPUs,
                            "data": one engine per GPU, a batch of requests split over them, "auto": cfg with two GPUs */
} ernie_options;

/* Low-VRAM modes and VAE tiling, the choices of `ernie-image generate/serve --offload --max-vram --vae-tiling
 * --vae-tile`, in a struct of their own: set it up with ernie_memory_options_init and pass it to ernie_load_ex. */
typedef enum ernie_offload {
  ERNIE_OFFLOAD_DEFAULT = 0,      /* ernie_options.keep_text_encoder decides: 1 = NONE, 0 = TEXT_ENCODER */
  ERNIE_OFFLOAD_NONE = 1,         /* every component loaded by ernie_load and resident */
  ERNIE_OFFLOAD_TEXT_ENCODER = 2, /* the prompt enhancer and the text encoder are loaded for each use and freed
                                     after it, the DiT loads with the first generation: one generation never holds
                                     the text encoder and the DiT at once (each request reloads the text encoder) */
  ERNIE_OFFLOAD_BLOCKS = 3        /* that, and the DiT's blocks stay in pinned host memory and stream to the GPU
                                     during each step (CUDA only; an error on the CPU) */
} ernie_offload;

typedef enum ernie_vae_tiling {
  ERNIE_VAE_TILING_AUTO = 0, /* CUDA: tiled only when the whole decode would not fit in free memory; CPU: never */
  ERNIE_VAE_TILING_ON = 1,   /* always decode in tiles (same image up to float rounding, less memory) */
  ERNIE_VAE_TILING_OFF = 2   /* never */
} ernie_vae_tiling;

typedef enum ernie_quantize {
  ERNIE_QUANTIZE_NONE = 0, /* weights as stored (a converted 8-bit file stays 8-bit) */
  ERNIE_QUANTIZE_FP8 = 1,  /* the DiT's linear weights to fp8 e4m3 at load, activations per token: W8A8 on Hopper's fp8
                              tensor cores (about half the DiT's memory, ~28 % less time per step on an H200) */
  ERNIE_QUANTIZE_INT8 = 2  /* the DiT's linear weights to int8 at load, weight-only (W8A16: half the DiT's memory, the
                              closest to bf16, about bf16's speed) */
} ernie_quantize;

typedef struct ernie_memory_options {
  size_t struct_size;  /* sizeof(ernie_memory_options), set by ernie_memory_options_init; later versions only
                          append fields, and a library takes the sizes of its own and earlier versions */
  int offload;         /* an ernie_offload (default ERNIE_OFFLOAD_DEFAULT) */
  double max_vram_gib; /* > 0 (CUDA only): GiB of device memory to stay under. Picks the least offloading (none,
                          text-encoder, blocks, each first untiled then with a tiled decode unless vae_tiling is
                          OFF) whose estimated peak fits one image at the model's default size and guidance with the
                          longest prompt the tokenizer keeps, and caps the device's allocator there (process-wide;
                          past it a generation fails with ERNIE_ERR_OOM). Fails when even blocks does not fit.
                          Leave offload at ERNIE_OFFLOAD_DEFAULT and keep_text_encoder at 1 with it. 0: no cap */
  int vae_tiling;      /* an ernie_vae_tiling (default AUTO) */
  int vae_tile;        /* tile side in image pixels, a multiple of the VAE's 8; 0 (default): 512 or less to fit */
  int quantize;        /* an ernie_quantize (default NONE): the DiT's linear weights (the first and last blocks stay
                          bf16), and the text encoder's projections in int8 (weight-only). Added in the
                          second version of this struct: a first-version struct (without it) is still accepted */
  int attention_fp8;   /* 1: the fp8 DiT blocks run attention in fp8 too (Hopper; ~2.6 % faster at 50 steps on an H200,
                          further from bf16); 0 (default): bf16 attention. Added in the third version of this struct
                          (earlier ones are still accepted) */
  int lora_at_runtime; /* 1: LoRAs on 8-bit DiT weights run as a low-rank side GEMM beside the exact 8-bit base
                          (`--lora-apply-mode at_runtime`, ~20 % slower steps with fp8 on an H200); 0 (default): they
                          are merged, then quantized. Float weights always merge. Added in the fourth version of this
                          struct (earlier ones are still accepted) */
} ernie_memory_options;

/* Component files that replace those of ernie_options.model_dir (the CLI's --diffusion-model, --text-encoder,
 * --vae, --tokenizer), told apart by content: safetensors with diffusers, ComfyUI or LDM/BFL names, and the DiT
 * and text encoder as GGUF too (a llama.cpp LLM GGUF, which also gives the tokenizer). Set up with
 * ernie_component_files_init and pass to ernie_load_components; NULL or "" keeps the model's own. With all four
 * set, ernie_options.model_dir may be NULL or "": the configs are then read off the files' shapes. */
typedef struct ernie_component_files {
  size_t struct_size;          /* sizeof(ernie_component_files), set by ernie_component_files_init; later versions
                                  only append fields */
  const char* diffusion_model; /* the DiT */
  /* Added in the second version of this struct (the first, ending here, is still accepted). */
  const char* text_encoder;    /* the text encoder (HF "model." names, or the diffusers text_encoder's) */
  const char* vae;             /* the VAE (diffusers or LDM/BFL layout) */
  const char* tokenizer;       /* a tokenizer.json file */
  /* Added in the third version of this struct (the second, ending here, is still accepted). */
  const char* lora_dir;        /* folder of LoRA .safetensors files that ernie_lora.name and prompt tags
                                  <lora:NAME:SCALE> name (`--lora-dir`); NULL or "": paths only */
} ernie_component_files;

/* A LoRA adapter for the DiT (diffusers/PEFT, ai-toolkit, kohya, OneTrainer or DiffSynth key names, told apart
 * by content): a file, or a name in ernie_component_files.lora_dir. Stacked adapters add up. */
typedef struct ernie_lora {
  size_t struct_size; /* sizeof(ernie_lora), set by ernie_lora_init; every element of ernie_request.loras has the
                         same struct_size, which is also the array's stride */
  const char* path;  /* a LoRA file; or NULL and a name: */
  const char* name;  /* the file's name in lora_dir without ".safetensors" */
  float scale;       /* delta W = scale * (alpha / rank) * B.A; -16..16 (ernie_lora_init: 1) */
} ernie_lora;

/* ernie_request.seed meaning "random", as -1 on the command line and in the HTTP API (and in stable-diffusion.cpp
 * and A1111): `req.seed = -1;` or `req.seed = ERNIE_SEED_RANDOM;`. The seed drawn (32 bits) is each result's
 * ernie_image.seed. The one seed the C API cannot ask for is therefore 2^64 - 1. */
#define ERNIE_SEED_RANDOM UINT64_MAX

typedef struct ernie_request {
  size_t struct_size;          /* sizeof(ernie_request), set by ernie_request_init (always start from it); later
                                  versions only append fields, and requests of an earlier size stay accepted */
  const char* prompt;          /* UTF-8 (required); <lora:NAME:SCALE> tags apply LoRAs from lora_dir and are
                                  removed before encoding */
  const char* negative_prompt; /* NULL or "": the reference's default "" */
  int width, height;           /* 0: 1024 */
  int steps;                   /* 0: the model's default (50, Turbo 8) */
  float cfg;                   /* -1: the model's default (4, Turbo 1); 1 or less turns guidance off */
  uint64_t seed;               /* rng "ernie": image i uses seed + i; torch's: one draw for the batch;
                                  ERNIE_SEED_RANDOM (a C -1): a random seed, reported in the results */
  int num_images;              /* 0 or 1: one image */
  int use_pe;                  /* 1: rewrite the prompt with the prompt enhancer */
  const float* init_latents;   /* NULL, or [num_images, channels, height/s, width/s] row-major float32 */
  size_t init_latents_count;   /* number of floats at init_latents */
  const char* sampler;         /* NULL or "": "euler"; else "dpmpp_2m" or "unipc" */
  float shift;                 /* 0: the model's scheduler shift; else a positive fixed shift */
  const char* rng;             /* NULL or "": "cpu" (torch's CPU generator); else "cuda" or "ernie" */
  const ernie_lora* loras;     /* NULL, or lora_count adapters, applied before the prompt's tags */
  int lora_count;
  /* img2img and inpainting (the third version; docs/cli.md has the semantics): */
  const struct ernie_image* init_image; /* NULL, or the image to start from; channels 3 (RGB) or 4 (alpha ignored) */
  float strength;              /* -1 (ernie_request_init): 0.75, or 1 with a mask; else (0, 1] */
  const struct ernie_image* mask; /* NULL, or init_image's size: channels 1 (grey: white repaints), 3, or 4 (any
                                  transparency: transparent repaints, as OpenAI's edits) */
  int mask_blur;               /* Gaussian sigma in pixels over the mask, 0..256 */
  int composite;               /* 1: paste init_image's unmasked pixels back over the result */
  int resize;                  /* 1: resize init_image (and mask) to width x height instead of refusing another size */
} ernie_request;

/* An image: the results of ernie_generate (an array the library allocates), and a request's init_image and mask.
 * Its layout is fixed for this SONAME (libernie-image.so.0): it has no struct_size, and never grows. */
typedef struct ernie_image {
  int width, height, channels; /* results: channels is 3 (RGB) */
  uint8_t* data;               /* height * width * channels bytes, row-major */
  uint64_t seed;               /* results: the image's seed (ignored in a request's init_image or mask) */
} ernie_image;

/* Called at each progress event; return non-zero to cancel the generation. phase is one of "load",
 * "encode", "enhance", "encode_image" (img2img), "denoise", "decode". */
typedef int (*ernie_progress_fn)(const char* phase, int step, int total, double elapsed_s, void* user);

void ernie_options_init(ernie_options* opt);
void ernie_request_init(ernie_request* req);
void ernie_memory_options_init(ernie_memory_options* mem);
void ernie_component_files_init(ernie_component_files* files);
void ernie_lora_init(ernie_lora* lora);

ernie_status ernie_load(const ernie_options* opt, ernie_model** out, char** err);
/* ernie_load with low-VRAM and VAE tiling options; mem NULL is ernie_load. Bad values (an unknown mode, a
 * negative max_vram_gib, both offload and max_vram_gib, BLOCKS or max_vram_gib on the CPU, a struct_size this
 * library does not know) are ERNIE_ERR_INVALID with a message naming the field. */
ernie_status ernie_load_ex(const ernie_options* opt, const ernie_memory_options* mem, ernie_model** out, char** err);
/* ernie_load_ex with component files (mem and files may be NULL). */
ernie_status ernie_load_components(const ernie_options* opt, const ernie_memory_options* mem,
                                   const ernie_component_files* files, ernie_model** out, char** err);
/* The offload mode the model was loaded with (NONE, TEXT_ENCODER or BLOCKS; DEFAULT for NULL). */
ernie_offload ernie_model_offload(const ernie_model* model);
ernie_status ernie_generate(ernie_model* model, const ernie_request* req, ernie_progress_fn progress, void* user,
                            ernie_image** out_images, int* out_count, char** err);
/* The text encoder output for a prompt: *out_data is [*out_tokens, *out_dim] float32 (free with ernie_free_floats). */
ernie_status ernie_encode_prompt(ernie_model* model, const char* prompt, float** out_data, int* out_tokens,
                                 int* out_dim, char** err);
/* Pixels per latent token: width and height must be multiples of it. */
int ernie_scale_factor(const ernie_model* model);

void ernie_free_images(ernie_image* images, int count);
void ernie_free_floats(float* data);
void ernie_free(ernie_model* model);
void ernie_free_string(char* s);
/* The message of the last failure on this thread ("" when none); valid until the next call on this thread. */
const char* ernie_last_error(void);
const char* ernie_version(void);

#ifdef __cplusplus
}
#endif
#endif /* ERNIE_IMAGE_H */
