/* pool.c: the persistent worker threads a CPU compressor uses for "all threads". One job at a
 * time: run() publishes fn/arg with a generation number, works as tid 0 itself and waits for
 * the others. Created once per compressor, so compressing never creates threads. */
#include "compress_internal.h"

#include <errno.h>
#include <pthread.h>
#include <unistd.h>

struct gv_pool_thread {
    struct gv_pool *pool;
    pthread_t th;
    int tid;
};

struct gv_pool {
    int size; /* threads including the caller */
    int started;
    struct gv_pool_thread *threads; /* size - 1 workers */
    pthread_mutex_t mu;
    pthread_cond_t cv_job;
    pthread_cond_t cv_done;
    uint64_t gen;
    int nth;     /* threads taking part in the current job */
    int pending; /* workers of the current job not yet done */
    int stop;
    gv_pool_fn fn;
    void *arg;
};

int gv_online_cpus(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (n > 256 ? 256 : (int)n);
}

static void *pool_main(void *p)
{
    struct gv_pool_thread *t = p;
    struct gv_pool *pool = t->pool;
    uint64_t seen = 0;
    pthread_mutex_lock(&pool->mu);
    for (;;) {
        while (!pool->stop && pool->gen == seen)
            pthread_cond_wait(&pool->cv_job, &pool->mu);
        if (pool->stop)
            break;
        seen = pool->gen;
        if (t->tid >= pool->nth)
            continue;
        gv_pool_fn fn = pool->fn;
        void *arg = pool->arg;
        int nth = pool->nth;
        pthread_mutex_unlock(&pool->mu);
        fn(arg, t->tid, nth);
        pthread_mutex_lock(&pool->mu);
        if (--pool->pending == 0)
            pthread_cond_signal(&pool->cv_done);
    }
    pthread_mutex_unlock(&pool->mu);
    return NULL;
}

gv_status_t gv_pool_create(int nthreads, struct gv_pool **pool_p)
{
    gv_status_t status;
    if (nthreads < 1)
        return GV_ERR_INVAL;
    struct gv_pool *pool = gv_calloc(1, sizeof(*pool));
    if (pool == NULL)
        return GV_ERR_NOMEM;
    pool->size = nthreads;
    pthread_mutex_init(&pool->mu, NULL);
    pthread_cond_init(&pool->cv_job, NULL);
    pthread_cond_init(&pool->cv_done, NULL);
    if (nthreads > 1) {
        pool->threads = gv_calloc((size_t)nthreads - 1, sizeof(*pool->threads));
        if (pool->threads == NULL) {
            status = GV_ERR_NOMEM;
            goto err_destroy;
        }
    }
    for (int i = 1; i < nthreads; i++) {
        struct gv_pool_thread *t = &pool->threads[i - 1];
        t->pool = pool;
        t->tid = i;
        int ret = pthread_create(&t->th, NULL, pool_main, t);
        if (ret != 0) {
            gv_log(GV_LOG_ERROR, "compress: cannot start worker thread %d: %s", i, strerror(ret));
            status = ret == EAGAIN ? GV_ERR_AGAIN : GV_ERR_IO;
            goto err_destroy;
        }
        pool->started++;
    }
    *pool_p = pool;
    return GV_OK;

err_destroy:
    gv_pool_destroy(pool);
    return status;
}

void gv_pool_destroy(struct gv_pool *pool)
{
    if (pool == NULL)
        return;
    pthread_mutex_lock(&pool->mu);
    pool->stop = 1;
    pthread_cond_broadcast(&pool->cv_job);
    pthread_mutex_unlock(&pool->mu);
    for (int i = 0; i < pool->started; i++)
        pthread_join(pool->threads[i].th, NULL);
    pthread_cond_destroy(&pool->cv_done);
    pthread_cond_destroy(&pool->cv_job);
    pthread_mutex_destroy(&pool->mu);
    gv_free(pool->threads);
    gv_free(pool);
}

void gv_pool_run(struct gv_pool *pool, int nth, gv_pool_fn fn, void *arg)
{
    if (pool == NULL || nth <= 1) {
        fn(arg, 0, 1);
        return;
    }
    if (nth > pool->size)
        nth = pool->size;
    pthread_mutex_lock(&pool->mu);
    pool->fn = fn;
    pool->arg = arg;
    pool->nth = nth;
    pool->pending = nth - 1;
    pool->gen++;
    pthread_cond_broadcast(&pool->cv_job);
    pthread_mutex_unlock(&pool->mu);
    fn(arg, 0, nth);
    pthread_mutex_lock(&pool->mu);
    while (pool->pending > 0)
        pthread_cond_wait(&pool->cv_done, &pool->mu);
    pthread_mutex_unlock(&pool->mu);
}
