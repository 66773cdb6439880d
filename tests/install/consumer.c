/* A program that knows ernie-image only as an installed library (tests/scripts/check_install.sh builds it with
 * `pkg-config --cflags --libs ernie-image` and with find_package(ernie-image)): prints the version, loads the
 * model in argv[1], generates a 16x16 image in 2 steps and writes it to argv[2] as a PPM, and checks that an
 * ernie_options without its struct_size is refused. */
#include <ernie_image.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: consumer MODEL_DIR OUT.ppm EXPECTED_VERSION\n");
    return 2;
  }
  printf("ernie-image %s\n", ernie_version());
  if (strcmp(ernie_version(), argv[3]) != 0) {
    fprintf(stderr, "version %s, expected %s\n", ernie_version(), argv[3]);
    return 1;
  }
  ernie_options opt;
  ernie_options_init(&opt);
  opt.model_dir = argv[1];
  opt.threads = 1;
  ernie_model* model = NULL;
  char* err = NULL;

  ernie_options old = opt;
  old.struct_size = 0; /* as a caller that skipped ernie_options_init */
  if (ernie_load(&old, &model, &err) != ERNIE_ERR_INVALID || !err || !strstr(err, "ernie_options.struct_size 0")) {
    fprintf(stderr, "struct_size 0 was not refused: %s\n", err ? err : "(no message)");
    return 1;
  }
  ernie_free_string(err);

  if (ernie_load(&opt, &model, &err) != ERNIE_OK) {
    fprintf(stderr, "ernie_load: %s\n", err);
    ernie_free_string(err);
    return 1;
  }
  ernie_request req;
  ernie_request_init(&req);
  req.prompt = "a cat";
  req.width = req.height = 16;
  req.steps = 2;
  req.seed = 42;
  ernie_image* images = NULL;
  int count = 0;
  if (ernie_generate(model, &req, NULL, NULL, &images, &count, &err) != ERNIE_OK || count != 1) {
    fprintf(stderr, "ernie_generate: %s\n", err ? err : "no image");
    return 1;
  }
  FILE* f = fopen(argv[2], "wb");
  if (!f) return 1;
  fprintf(f, "P6\n%d %d\n255\n", images[0].width, images[0].height);
  fwrite(images[0].data, 1, (size_t)images[0].width * images[0].height * 3, f);
  fclose(f);
  printf("%dx%d image, seed %llu\n", images[0].width, images[0].height, (unsigned long long)images[0].seed);
  ernie_free_images(images, count);
  ernie_free(model);
  return 0;
}
