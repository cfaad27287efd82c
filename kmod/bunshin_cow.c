// SPDX-License-Identifier: GPL-2.0
/*
 * bunshin_cow - share a process's anonymous memory copy-on-write with
 * processes that are not its fork() children ("snapshot holder", design (b)
 * of kmod/README.md).
 *
 * What appears where:
 *   /dev/bunshin_cow (misc device, mode 0600)
 *     ioctl BUNSHIN_COW_CAPTURE {pid, start, len} -> holder id
 *         write-protects the source's pages in [start, start+len), clears
 *         PageAnonExclusive and takes a reference on each, like fork() does
 *         for a child (pages that may be DMA-pinned are copied instead).
 *     ioctl BUNSHIN_COW_RELEASE holder   drop the capturing fd's ownership
 *     ioctl BUNSHIN_COW_STATS            counters (holders, pages held, ...)
 *     mmap(MAP_PRIVATE, offset = BUNSHIN_COW_MMAP_OFFSET(holder))
 *         a clone's view: faults insert the held page read-only (special PTE,
 *         VM_MIXEDMAP); a write makes do_wp_page copy it into a private
 *         anonymous page of the clone.
 *   /sys/module/bunshin_cow/parameters/
 *     fault_around          pages mapped per read fault (default 16)
 *     skip_clear_exclusive  TEST ONLY: omit ClearPageAnonExclusive (makes the
 *                           source's later writes leak into clones)
 *
 * Only exported symbols are used.  x86-64 only (TLB flush via __flush_tlb_all).
 */

#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/bitmap.h>
#include <linux/fs.h>
#include <linux/highmem.h>
#include <linux/huge_mm.h>
#include <linux/idr.h>
#include <linux/ktime.h>
#include <linux/kref.h>
#include <linux/miscdevice.h>
#include <linux/mm.h>
#include <linux/mmu_notifier.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/pfn_t.h>
#include <linux/pgtable.h>
#include <linux/pid.h>
#include <linux/sched/mm.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/version.h>
#include <linux/vmalloc.h>
#include <asm/tlbflush.h>

#include "bunshin_cow.h"

#ifndef CONFIG_X86_64
#error "bunshin_cow supports x86-64 only (TLB flush via __flush_tlb_all)"
#endif

#define BCOW_ID_PGOFF_SHIFT	(BUNSHIN_COW_HOLDER_SHIFT - PAGE_SHIFT)
#define BCOW_MAX_ID		((1 << 20) - 1)
#define BCOW_MAX_LEN		(64ULL << 30)	/* 64 GiB per capture */
#define BCOW_FAULT_RETRIES	16

static bool skip_clear_exclusive;
module_param(skip_clear_exclusive, bool, 0444);
MODULE_PARM_DESC(skip_clear_exclusive,
		 "TEST ONLY (negative control): do not clear PageAnonExclusive on capture");

static unsigned int fault_around = 16;
module_param(fault_around, uint, 0644);
MODULE_PARM_DESC(fault_around, "pages mapped per clone read fault, 1..512 (default 16)");

struct bcow_holder {
	struct kref ref;
	u32 id;
	struct file *owner;		/* capturing fd; NULL once released */
	unsigned long npages;
	struct page **pages;		/* NULL entry: never touched, reads as zero */
};

static DEFINE_IDR(bcow_idr);
static DEFINE_MUTEX(bcow_lock);		/* protects bcow_idr and holder->owner */
static atomic64_t bcow_nr_holders = ATOMIC64_INIT(0);
static atomic64_t bcow_nr_pages = ATOMIC64_INIT(0);
static atomic64_t bcow_nr_mappings = ATOMIC64_INIT(0);
static atomic64_t bcow_nr_captures = ATOMIC64_INIT(0);

static void bcow_put_pages(struct page **pages, unsigned long npages)
{
	unsigned long i, held = 0;

	for (i = 0; i < npages; i++) {
		if (pages[i]) {
			put_page(pages[i]);
			held++;
		}
		if ((i & 1023) == 1023)
			cond_resched();
	}
	atomic64_sub(held, &bcow_nr_pages);
}

static void bcow_holder_free(struct kref *ref)
{
	struct bcow_holder *h = container_of(ref, struct bcow_holder, ref);

	bcow_put_pages(h->pages, h->npages);
	kvfree(h->pages);
	kfree(h);
	atomic64_dec(&bcow_nr_holders);
}

static void bcow_holder_put(struct bcow_holder *h)
{
	kref_put(&h->ref, bcow_holder_free);
}

/* ------------------------------------------------------------------ capture */

struct bcow_walk {
	struct mm_struct *mm;
	struct vm_area_struct *vma;
	unsigned long base;		/* capture start address */
	struct page **pages;
	unsigned long *to_copy;		/* bitmap: entries to replace by a copy */
	u64 shared, copied, zero;
	bool flush;
};

static void bcow_flush_tlb_all(void *unused)
{
	__flush_tlb_all();
}

/* Capture the pages of one huge PMD. Returns 0, or -EAGAIN to re-walk the PMD. */
static int bcow_capture_pmd_huge(struct bcow_walk *w, pmd_t *pmd,
				 unsigned long addr, unsigned long end)
{
	struct vm_area_struct *vma = w->vma;
	unsigned long idx = (addr - w->base) >> PAGE_SHIFT;
	unsigned long n = (end - addr) >> PAGE_SHIFT;
	unsigned long first = (addr & ~HPAGE_PMD_MASK) >> PAGE_SHIFT;
	struct page *head;
	spinlock_t *ptl;
	pmd_t pmdval;
	unsigned long i;

	ptl = pmd_lock(w->mm, pmd);
	pmdval = *pmd;
	if (!pmd_trans_huge(pmdval)) {
		spin_unlock(ptl);
		return -EAGAIN;		/* split or migrating meanwhile */
	}
	head = pmd_page(pmdval);
	if (!PageAnon(head)) {
		if (vma_is_anonymous(vma)) {
			/* huge zero page: the source never wrote here */
			spin_unlock(ptl);
			w->zero += n;
			return 0;
		}
		/* read-only file THP in a private file mapping: share it */
		page_ref_add(head, n);
		for (i = 0; i < n; i++)
			w->pages[idx + i] = head + first + i;
		w->shared += n;
		spin_unlock(ptl);
		return 0;
	}
	page_ref_add(head, n);
	for (i = 0; i < n; i++)
		w->pages[idx + i] = head + first + i;
	if (page_needs_cow_for_dma(vma, head)) {
		/* like copy_huge_pmd(): a maybe-pinned page is copied, not shared */
		bitmap_set(w->to_copy, idx, n);
		spin_unlock(ptl);
		return 0;
	}
	if (!skip_clear_exclusive)
		ClearPageAnonExclusive(head);
	if (pmd_write(pmdval)) {
		pmdp_set_wrprotect(w->mm, addr & HPAGE_PMD_MASK, pmd);
		w->flush = true;
	}
	w->shared += n;
	spin_unlock(ptl);
	return 0;
}

/*
 * Capture the PTEs of one page table.  Returns the address reached: @end on
 * success, less when a non-present entry was found (*fault set: the caller
 * faults it in and continues), or a negative errno via *err.
 */
static unsigned long bcow_capture_ptes(struct bcow_walk *w, pmd_t *pmd,
				       unsigned long addr, unsigned long end,
				       bool *fault, int *err)
{
	struct vm_area_struct *vma = w->vma;
	spinlock_t *ptl;
	pte_t *start_pte, *pte;

	start_pte = pte_offset_map_lock(w->mm, pmd, addr, &ptl);
	for (pte = start_pte; addr < end; addr += PAGE_SIZE, pte++) {
		unsigned long idx = (addr - w->base) >> PAGE_SHIFT;
		pte_t ptent = ptep_get(pte);
		struct page *page;

		if (pte_none(ptent)) {
			w->zero++;
			continue;
		}
		if (!pte_present(ptent)) {
			*fault = true;	/* swap/migration entry: fault it in */
			break;
		}
		if (pte_special(ptent)) {
			if (is_zero_pfn(pte_pfn(ptent))) {
				w->zero++;
				continue;
			}
			*err = -EINVAL;
			break;
		}
		if (pte_devmap(ptent)) {
			*err = -EOPNOTSUPP;
			break;
		}
		page = pte_page(ptent);
		get_page(page);
		w->pages[idx] = page;
		if (!PageAnon(page) || PageKsm(page)) {
			/* page cache page of a private file mapping, or KSM: never reused in place */
			w->shared++;
			continue;
		}
		if (page_needs_cow_for_dma(vma, page)) {
			/* like copy_present_pte(): copy a maybe-pinned page */
			__set_bit(idx, w->to_copy);
			continue;
		}
		if (!skip_clear_exclusive)
			ClearPageAnonExclusive(page);
		if (pte_write(ptent)) {
			ptep_set_wrprotect(w->mm, addr, pte);
			w->flush = true;
		}
		w->shared++;
	}
	pte_unmap_unlock(start_pte, ptl);
	return addr;
}

static int bcow_fault_in(struct bcow_walk *w, unsigned long addr, int *tries)
{
	vm_fault_t ret;

	if (++*tries > BCOW_FAULT_RETRIES)
		return -EAGAIN;
	/* no FAULT_FLAG_ALLOW_RETRY: the mmap lock (held for write) is not dropped */
	ret = handle_mm_fault(w->vma, addr, FAULT_FLAG_REMOTE, NULL);
	if (ret & VM_FAULT_OOM)
		return -ENOMEM;
	if (ret & VM_FAULT_ERROR)
		return -EFAULT;
	return 0;
}

static int bcow_capture_vma(struct bcow_walk *w, unsigned long addr, unsigned long end)
{
	int tries = 0;
	int err = 0;

	while (addr < end) {
		unsigned long next;
		pgd_t *pgd;
		p4d_t *p4d;
		pud_t *pud;
		pmd_t *pmd;
		pmd_t pmdval;
		bool fault = false;

		if (fatal_signal_pending(current))
			return -EINTR;

		pgd = pgd_offset(w->mm, addr);
		next = pgd_addr_end(addr, end);
		if (pgd_none(*pgd)) {
			w->zero += (next - addr) >> PAGE_SHIFT;
			addr = next;
			continue;
		}
		if (pgd_bad(*pgd))
			return -EFAULT;
		p4d = p4d_offset(pgd, addr);
		next = p4d_addr_end(addr, end);
		if (p4d_none(*p4d)) {
			w->zero += (next - addr) >> PAGE_SHIFT;
			addr = next;
			continue;
		}
		if (p4d_bad(*p4d))
			return -EFAULT;
		pud = pud_offset(p4d, addr);
		next = pud_addr_end(addr, end);
		if (pud_none(*pud)) {
			w->zero += (next - addr) >> PAGE_SHIFT;
			addr = next;
			continue;
		}
		if (pud_trans_huge(*pud) || pud_devmap(*pud) || pud_bad(*pud))
			return -EOPNOTSUPP;
		pmd = pmd_offset(pud, addr);
		next = pmd_addr_end(addr, end);
		pmdval = READ_ONCE(*pmd);
		if (pmd_none(pmdval)) {
			w->zero += (next - addr) >> PAGE_SHIFT;
			addr = next;
			continue;
		}
		if (is_swap_pmd(pmdval)) {
			err = bcow_fault_in(w, addr, &tries);	/* THP migration entry */
			if (err)
				return err;
			continue;
		}
		if (pmd_devmap(pmdval))
			return -EOPNOTSUPP;
		if (pmd_trans_huge(pmdval)) {
			if (bcow_capture_pmd_huge(w, pmd, addr, next) == -EAGAIN)
				continue;	/* re-read the pmd */
			addr = next;
			tries = 0;
			continue;
		}
		if (pmd_bad(pmdval))
			return -EFAULT;
		addr = bcow_capture_ptes(w, pmd, addr, next, &fault, &err);
		if (err)
			return err;
		if (fault) {
			err = bcow_fault_in(w, addr, &tries);
			if (err)
				return err;
			continue;
		}
		tries = 0;
	}
	return 0;
}

/* Replace maybe-DMA-pinned pages by private copies (after the walk: may sleep). */
static int bcow_copy_pinned(struct bcow_walk *w, unsigned long npages)
{
	unsigned long idx;

	for_each_set_bit(idx, w->to_copy, npages) {
		struct page *copy = alloc_page(GFP_HIGHUSER | __GFP_NOWARN);

		if (!copy)
			return -ENOMEM;
		copy_highpage(copy, w->pages[idx]);
		put_page(w->pages[idx]);
		w->pages[idx] = copy;
		__clear_bit(idx, w->to_copy);
		w->copied++;
		cond_resched();
	}
	return 0;
}

static int bcow_capture_mm(struct bcow_walk *w, unsigned long start, unsigned long end)
{
	struct mm_struct *mm = w->mm;
	unsigned long addr = start;
	ktime_t t0 = ktime_get(), t1, t2, t3;
	int err;

	err = mmap_write_lock_killable(mm);
	if (err)
		return err;
	if (mm_has_notifiers(mm)) {
		/* mmu_notifier_invalidate_range_* are not exported: refuse, never skip them */
		mmap_write_unlock(mm);
		return -EOPNOTSUPP;
	}
	raw_write_seqcount_begin(&mm->write_protect_seq);	/* GUP-fast vs. us, as in fork */
	while (addr < end) {
		struct vm_area_struct *vma = find_vma(mm, addr);
		unsigned long vend;

		if (!vma || vma->vm_start > addr) {
			err = -EFAULT;		/* hole in the range */
			break;
		}
		if (vma->vm_flags & (VM_SHARED | VM_MAYSHARE | VM_IO | VM_PFNMAP |
				     VM_MIXEDMAP | VM_HUGETLB)) {
			err = -EINVAL;		/* only private, normal memory */
			break;
		}
		vend = min(end, vma->vm_end);
		w->vma = vma;
		err = bcow_capture_vma(w, addr, vend);
		if (err)
			break;
		addr = vend;
	}
	t1 = ktime_get();
	if (w->flush)
		on_each_cpu(bcow_flush_tlb_all, NULL, 1);
	t2 = ktime_get();
	raw_write_seqcount_end(&mm->write_protect_seq);
	mmap_write_unlock(mm);
	if (!err)
		err = bcow_copy_pinned(w, (end - start) >> PAGE_SHIFT);
	t3 = ktime_get();
	pr_debug("capture %#lx+%#lx: err %d, lock+walk %lld us, tlb flush %lld us, copies %lld us\n",
		 start, end - start, err, ktime_us_delta(t1, t0), ktime_us_delta(t2, t1),
		 ktime_us_delta(t3, t2));
	return err;
}

static int bcow_ioctl_capture(struct file *file, struct bunshin_cow_capture __user *uarg)
{
	struct bunshin_cow_capture arg;
	struct bcow_walk w = {};
	struct bcow_holder *h;
	struct task_struct *task;
	struct pid *pid;
	unsigned long npages;
	ktime_t t0 = ktime_get(), t1;
	int id, err;

	if (!capable(CAP_SYS_PTRACE))
		return -EPERM;
	if (copy_from_user(&arg, uarg, sizeof(arg)))
		return -EFAULT;
	if (arg.flags || !arg.len || arg.len > BCOW_MAX_LEN ||
	    !PAGE_ALIGNED(arg.start) || !PAGE_ALIGNED(arg.len) ||
	    arg.start + arg.len < arg.start || arg.start + arg.len > TASK_SIZE_MAX)
		return -EINVAL;
	npages = arg.len >> PAGE_SHIFT;

	pid = find_get_pid(arg.pid);
	if (!pid)
		return -ESRCH;
	task = get_pid_task(pid, PIDTYPE_PID);
	put_pid(pid);
	if (!task)
		return -ESRCH;
	w.mm = get_task_mm(task);
	put_task_struct(task);
	if (!w.mm)
		return -ESRCH;

	err = -ENOMEM;
	h = kzalloc(sizeof(*h), GFP_KERNEL);
	if (!h)
		goto out_mm;
	/*
	 * Large arrays straight from vmalloc: kvcalloc's high-order kmalloc attempt can
	 * enter direct compaction and cost milliseconds (seen in the guest).
	 */
	if (npages * sizeof(*h->pages) > 16 * PAGE_SIZE)
		h->pages = __vmalloc(npages * sizeof(*h->pages), GFP_KERNEL_ACCOUNT | __GFP_ZERO);
	else
		h->pages = kvcalloc(npages, sizeof(*h->pages), GFP_KERNEL_ACCOUNT);
	if (!h->pages)
		goto out_holder;
	w.to_copy = bitmap_zalloc(npages, GFP_KERNEL);
	if (!w.to_copy)
		goto out_pages;
	t1 = ktime_get();
	w.base = arg.start;
	w.pages = h->pages;
	h->npages = npages;
	kref_init(&h->ref);

	err = bcow_capture_mm(&w, arg.start, arg.start + arg.len);
	atomic64_add(w.shared + w.copied + bitmap_weight(w.to_copy, npages), &bcow_nr_pages);
	atomic64_inc(&bcow_nr_holders);
	bitmap_free(w.to_copy);
	mmput(w.mm);
	w.mm = NULL;
	if (err)
		goto out_put;

	mutex_lock(&bcow_lock);
	id = idr_alloc(&bcow_idr, h, 1, BCOW_MAX_ID + 1, GFP_KERNEL);
	if (id >= 0) {
		h->id = id;
		h->owner = file;
	}
	mutex_unlock(&bcow_lock);
	if (id < 0) {
		err = id;
		goto out_put;
	}

	arg.holder = id;
	arg.pages_shared = w.shared;
	arg.pages_copied = w.copied;
	arg.pages_zero = w.zero;
	if (copy_to_user(uarg, &arg, sizeof(arg))) {
		mutex_lock(&bcow_lock);
		idr_remove(&bcow_idr, id);
		mutex_unlock(&bcow_lock);
		err = -EFAULT;
		goto out_put;
	}
	atomic64_inc(&bcow_nr_captures);
	pr_debug("holder %d: pid %d, %lu pages, ioctl %lld us (setup %lld us)\n", id, arg.pid,
		 npages, ktime_us_delta(ktime_get(), t0), ktime_us_delta(t1, t0));
	return 0;

out_put:
	bcow_holder_put(h);		/* puts the references taken so far */
	return err;
out_pages:
	kvfree(h->pages);
out_holder:
	kfree(h);
out_mm:
	mmput(w.mm);
	return err;
}

static int bcow_ioctl_release(struct file *file, u32 __user *uid)
{
	struct bcow_holder *h;
	u32 id;

	if (get_user(id, uid))
		return -EFAULT;
	mutex_lock(&bcow_lock);
	h = idr_find(&bcow_idr, id);
	if (!h || h->owner != file) {
		mutex_unlock(&bcow_lock);
		return h ? -EPERM : -ENOENT;
	}
	idr_remove(&bcow_idr, id);
	h->owner = NULL;
	mutex_unlock(&bcow_lock);
	bcow_holder_put(h);
	return 0;
}

static int bcow_ioctl_stats(struct bunshin_cow_stats __user *uarg)
{
	struct bunshin_cow_stats st = {
		.holders = atomic64_read(&bcow_nr_holders),
		.pages_held = atomic64_read(&bcow_nr_pages),
		.mappings = atomic64_read(&bcow_nr_mappings),
		.captures = atomic64_read(&bcow_nr_captures),
	};

	return copy_to_user(uarg, &st, sizeof(st)) ? -EFAULT : 0;
}

static long bcow_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	switch (cmd) {
	case BUNSHIN_COW_CAPTURE:
		return bcow_ioctl_capture(file, (void __user *)arg);
	case BUNSHIN_COW_RELEASE:
		return bcow_ioctl_release(file, (void __user *)arg);
	case BUNSHIN_COW_STATS:
		return bcow_ioctl_stats((void __user *)arg);
	default:
		return -ENOTTY;
	}
}

/* --------------------------------------------------------- clone mappings */

static vm_fault_t bcow_insert(struct vm_area_struct *vma, struct bcow_holder *h,
			      unsigned long addr, unsigned long idx)
{
	struct page *page = h->pages[idx];
	unsigned long pfn = page ? page_to_pfn(page) : my_zero_pfn(addr);

	/* read-only special PTE: no rmap, no refcount; a write copies (do_wp_page) */
	return vmf_insert_mixed(vma, addr, pfn_to_pfn_t(pfn));
}

static vm_fault_t bcow_fault(struct vm_fault *vmf)
{
	struct vm_area_struct *vma = vmf->vma;
	struct bcow_holder *h = vma->vm_private_data;
	unsigned long base = (unsigned long)h->id << BCOW_ID_PGOFF_SHIFT;
	unsigned long idx = vmf->pgoff - base;
	unsigned long win, addr, start, end;
	vm_fault_t ret;

	if (vmf->pgoff < base || idx >= h->npages)
		return VM_FAULT_SIGBUS;
	ret = bcow_insert(vma, h, vmf->address, idx);
	if (ret != VM_FAULT_NOPAGE)
		return ret;

	/* fault-around: map the neighbours too (like TTM's prefault) */
	win = clamp_val(fault_around, 1, 512) * PAGE_SIZE;
	start = max(vma->vm_start, ALIGN_DOWN(vmf->address, win));
	end = min(vma->vm_end, start + win);
	for (addr = start; addr < end; addr += PAGE_SIZE) {
		unsigned long i = idx + ((long)(addr - (vmf->address & PAGE_MASK)) >> PAGE_SHIFT);

		if (addr == (vmf->address & PAGE_MASK) || i >= h->npages)
			continue;
		if (bcow_insert(vma, h, addr, i) != VM_FAULT_NOPAGE)
			break;
	}
	return VM_FAULT_NOPAGE;
}

static void bcow_vm_open(struct vm_area_struct *vma)
{
	struct bcow_holder *h = vma->vm_private_data;

	kref_get(&h->ref);
	atomic64_inc(&bcow_nr_mappings);
}

static void bcow_vm_close(struct vm_area_struct *vma)
{
	struct bcow_holder *h = vma->vm_private_data;

	atomic64_dec(&bcow_nr_mappings);
	bcow_holder_put(h);
}

static const struct vm_operations_struct bcow_vm_ops = {
	.open = bcow_vm_open,
	.close = bcow_vm_close,
	.fault = bcow_fault,
};

static int bcow_mmap(struct file *file, struct vm_area_struct *vma)
{
	unsigned long id = vma->vm_pgoff >> BCOW_ID_PGOFF_SHIFT;
	unsigned long first = vma->vm_pgoff & ((1UL << BCOW_ID_PGOFF_SHIFT) - 1);
	struct bcow_holder *h;

	if (vma->vm_flags & (VM_SHARED | VM_MAYSHARE))
		return -EINVAL;		/* a shared mapping would write the held pages */
	if (id > BCOW_MAX_ID)
		return -EINVAL;
	mutex_lock(&bcow_lock);
	h = idr_find(&bcow_idr, id);
	if (h)
		kref_get(&h->ref);
	mutex_unlock(&bcow_lock);
	if (!h)
		return -ENOENT;
	if (first + vma_pages(vma) > h->npages) {
		bcow_holder_put(h);
		return -EINVAL;
	}
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 3, 0)
	vm_flags_set(vma, VM_MIXEDMAP | VM_DONTEXPAND);
#else
	vma->vm_flags |= VM_MIXEDMAP | VM_DONTEXPAND;
#endif
	vma->vm_private_data = h;
	vma->vm_ops = &bcow_vm_ops;
	atomic64_inc(&bcow_nr_mappings);
	return 0;
}

static int bcow_release(struct inode *inode, struct file *file)
{
	struct bcow_holder *h;
	int id;

	/* closing the capturing fd releases the holders it still owns */
	mutex_lock(&bcow_lock);
	idr_for_each_entry(&bcow_idr, h, id) {
		if (h->owner != file)
			continue;
		idr_remove(&bcow_idr, id);
		h->owner = NULL;
		bcow_holder_put(h);
	}
	mutex_unlock(&bcow_lock);
	return 0;
}

static const struct file_operations bcow_fops = {
	.owner = THIS_MODULE,
	.unlocked_ioctl = bcow_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
	.mmap = bcow_mmap,
	.release = bcow_release,
	.llseek = noop_llseek,
};

static struct miscdevice bcow_misc = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "bunshin_cow",
	.fops = &bcow_fops,
	.mode = 0600,
};

static int __init bcow_init(void)
{
	int err;

	err = misc_register(&bcow_misc);
	if (err) {
		pr_err("misc_register(bunshin_cow) failed: %d\n", err);
		return err;
	}
	pr_info("loaded: /dev/%s (fault_around=%u%s)\n", bcow_misc.name, fault_around,
		skip_clear_exclusive ? ", TEST ONLY skip_clear_exclusive=1" : "");
	return 0;
}

static void __exit bcow_exit(void)
{
	/* open fds and clone mappings pin the module: no holder is left here */
	misc_deregister(&bcow_misc);
	idr_destroy(&bcow_idr);
	pr_info("unloaded\n");
}

module_init(bcow_init);
module_exit(bcow_exit);

MODULE_LICENSE("GPL");
MODULE_AUTHOR("Bunshin Gym");
MODULE_DESCRIPTION("Copy-on-write sharing of a process's anonymous memory with non-child clones");
