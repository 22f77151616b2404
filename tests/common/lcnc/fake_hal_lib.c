/* A stand-in for LinuxCNC's hal_lib.so, for tests/linuxcnc_layout.rs: it offers the part of
 * hal_lib's API rtapi's master calls at start, and keeps its structures in a block that is a file
 * (FAKE_HAL_BLOCK), so that a test can see afterwards what was written into it. After each of its
 * own calls it copies the block to FAKE_HAL_BLOCK.mine: any byte that differs between the two at
 * the end was written by someone else (the master).
 *
 * Built with -DMOVED, its hal_comp_t has one more field before the name (as a release with another
 * layout might): every later field moves by 8 bytes. Built without, it is laid out as LinuxCNC 2.9's
 * hal_priv.h (LP64), so that the master accepts it: the control that the test's refusal comes from
 * the moved field and nothing else.
 *
 * FAKE_HAL_LOADED names a file created when the master loads it (rtapi_app_main). */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* What the master exports to modules. */
extern int rtapi_init(const char *name);
extern int rtapi_exit(int id);
extern int rtapi_shmem_new(int key, int module_id, unsigned long size);

#define BLOCK 65536
#define HAL_SIZE (256 * 4096)
#define NAME 48

struct comp {
    long next_ptr;
    int comp_id, mem_id, type, ready, pid;
    void *shmem_base;
#ifdef MOVED
    long instances; /* the field a new release might add */
#endif
    char name[NAME];
    int (*make)(char *, char *);
    long insmod_args;
};

struct pin {
    long next_ptr, data_ptr_addr, owner_ptr, signal;
    char dummysig[8];
    long oldname;
    int type, dir;
    char name[NAME];
};

struct funct {
    long next_ptr;
    int uses_fp;
    long owner_ptr;
    int reentrant, users;
    void *arg;
    void (*funct)(void *, long);
    int *runtime;
    int maxtime;
    char maxtime_increased;
    char name[NAME];
};

char *hal_shmem_base;
static char mine[BLOCK];
static size_t top = 64;
static struct comp *comps[8];
static struct pin *pins[8];
static struct funct *functs[8];
static int ncomps, npins, nfuncts, next_id = 70;

static void record(void) {
    const char *path = getenv("FAKE_HAL_BLOCK");
    char copy[4096];
    memcpy(mine, hal_shmem_base, BLOCK);
    snprintf(copy, sizeof copy, "%s.mine", path);
    FILE *f = fopen(copy, "w");
    if (f) {
        fwrite(mine, 1, BLOCK, f);
        fclose(f);
    }
}

static void *take(size_t n) {
    void *p = hal_shmem_base + top;
    top += (n + 7) & ~(size_t)7;
    return p;
}

int rtapi_app_main(void) {
    const char *path = getenv("FAKE_HAL_BLOCK");
    const char *loaded = getenv("FAKE_HAL_LOADED");
    if (loaded) close(open(loaded, O_CREAT | O_WRONLY, 0644));
    if (!path) return -1;
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || ftruncate(fd, BLOCK) < 0) return -1;
    hal_shmem_base = mmap(NULL, BLOCK, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (hal_shmem_base == MAP_FAILED) return -1;
    int mod = rtapi_init("HAL_LIB");
    if (mod < 0 || rtapi_shmem_new(0x48414C32, mod, HAL_SIZE) < 0) return -1;
    *(int *)hal_shmem_base = 0x10; /* HAL_VER */
    record();
    return 0;
}

void rtapi_app_exit(void) { record(); }

int hal_init(const char *name) {
    struct comp *c = take(sizeof *c);
    c->comp_id = next_id++;
    c->type = 1;
    strncpy(c->name, name, NAME - 1);
    comps[ncomps++] = c;
    record();
    return c->comp_id;
}

static struct comp *comp_of(int id) {
    for (int i = 0; i < ncomps; i++)
        if (comps[i] && comps[i]->comp_id == id) return comps[i];
    return NULL;
}

int hal_exit(int id) {
    for (int i = 0; i < ncomps; i++)
        if (comps[i] && comps[i]->comp_id == id) comps[i] = NULL;
    record();
    return 0;
}

int hal_ready(int id) {
    struct comp *c = comp_of(id);
    if (c) c->ready = 1;
    record();
    return c ? 0 : -22;
}

int hal_set_constructor(int id, int (*make)(char *, char *)) {
    struct comp *c = comp_of(id);
    if (c) c->make = make;
    record();
    return c ? 0 : -22;
}

void *hal_malloc(long size) {
    void *p = take(size);
    record();
    return p;
}

int hal_pin_u32_new(const char *name, int dir, uint32_t **data_ptr_addr, int id) {
    struct comp *c = comp_of(id);
    if (!c) return -22;
    struct pin *p = take(sizeof *p);
    p->data_ptr_addr = (char *)data_ptr_addr - hal_shmem_base;
    p->owner_ptr = (char *)c - hal_shmem_base;
    p->type = 4;
    p->dir = dir;
    strncpy(p->name, name, NAME - 1);
    *data_ptr_addr = (uint32_t *)p->dummysig;
    pins[npins++] = p;
    record();
    return 0;
}

int hal_export_funct(const char *name, void (*funct)(void *, long), void *arg, int uses_fp,
                     int reentrant, int id) {
    struct comp *c = comp_of(id);
    if (!c) return -22;
    struct funct *f = take(sizeof *f);
    f->owner_ptr = (char *)c - hal_shmem_base;
    f->uses_fp = uses_fp;
    f->reentrant = reentrant;
    f->arg = arg;
    f->funct = funct;
    strncpy(f->name, name, NAME - 1);
    functs[nfuncts++] = f;
    record();
    return 0;
}

struct comp *halpr_find_comp_by_name(const char *name) {
    for (int i = 0; i < ncomps; i++)
        if (comps[i] && strcmp(comps[i]->name, name) == 0) return comps[i];
    return NULL;
}

struct pin *halpr_find_pin_by_name(const char *name) {
    for (int i = 0; i < npins; i++)
        if (strcmp(pins[i]->name, name) == 0) return pins[i];
    return NULL;
}

struct funct *halpr_find_funct_by_name(const char *name) {
    for (int i = 0; i < nfuncts; i++)
        if (strcmp(functs[i]->name, name) == 0) return functs[i];
    return NULL;
}

struct funct *halpr_find_funct_by_owner(struct comp *owner, struct funct *start) {
    (void)owner;
    (void)start;
    return NULL;
}
